'use strict';
/*
 * fixtures.js - request bodies and headers the tests send. Questions carry a
 * random suffix (uniq) so that no two tests share a cache entry by accident.
 */
const crypto = require('node:crypto');

const CHAT_MODEL = 'gpt-4o-mini';
const COMPLETION_MODEL = 'gpt-3.5-turbo-instruct';
const EMBEDDING_MODEL = 'text-embedding-3-small';
const CLAUDE_MODEL = 'claude-sonnet-4-5';

const uniq = (label = 'question') => `${label} ${crypto.randomBytes(4).toString('hex')}`;

const WEATHER_SCHEMA = {
    type: 'object',
    properties: {city: {type: 'string'}, days: {type: 'integer'}},
    required: ['city'],
};
const OPENAI_TOOL = {
    type: 'function',
    function: {name: 'get_weather', description: 'Weather forecast for a city', parameters: WEATHER_SCHEMA},
};
const ANTHROPIC_TOOL = {name: 'get_weather', description: 'Weather forecast for a city',
    input_schema: WEATHER_SCHEMA};

function chatBody(text, extra = {}) {
    return {
        model: CHAT_MODEL,
        messages: [{role: 'system', content: 'You are terse.'}, {role: 'user', content: text}],
        ...extra,
    };
}

function completionBody(text, extra = {}) {
    return {model: COMPLETION_MODEL, prompt: text, max_tokens: 32, ...extra};
}

function embeddingBody(text, extra = {}) {
    return {model: EMBEDDING_MODEL, input: text, ...extra};
}

function messagesBody(text, extra = {}) {
    return {model: CLAUDE_MODEL, max_tokens: 256, messages: [{role: 'user', content: text}], ...extra};
}

const STREAM_WITH_USAGE = {stream: true, stream_options: {include_usage: true}};

const bearer = (key) => ({authorization: `Bearer ${key}`});
const apiKey = (key) => ({'x-api-key': key, 'anthropic-version': '2023-06-01'});

module.exports = {
    CHAT_MODEL, COMPLETION_MODEL, EMBEDDING_MODEL, CLAUDE_MODEL,
    uniq, chatBody, completionBody, embeddingBody, messagesBody, STREAM_WITH_USAGE,
    OPENAI_TOOL, ANTHROPIC_TOOL, bearer, apiKey,
};
