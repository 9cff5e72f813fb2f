'use strict';
/*
 * sdk.js - the official clients, configured the way the client tests use
 * them: no retries (a retry would hide a failure and move call counts) and a
 * short timeout.
 */
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');

/* baseUrl: server root (the mock or the proxy), without /v1. */
function openai(baseUrl, apiKey = 'sk-client-test-openai') {
    return new OpenAI({baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 30000});
}

function anthropic(baseUrl, apiKey = 'sk-ant-client-test') {
    return new Anthropic({baseURL: baseUrl, apiKey, maxRetries: 0, timeout: 30000});
}

const WEATHER_SCHEMA = {
    type: 'object',
    properties: {city: {type: 'string'}, days: {type: 'integer'}},
    required: ['city'],
};
const OPENAI_TOOL = {type: 'function', function: {name: 'get_weather', parameters: WEATHER_SCHEMA}};
const ANTHROPIC_TOOL = {name: 'get_weather', description: 'Weather forecast', input_schema: WEATHER_SCHEMA};

/* Collect an OpenAI chat stream: text, finish reason, the usage chunk, chunk count. */
async function collectChatStream(stream) {
    const out = {text: '', finish: null, usage: null, chunks: 0, usageInOtherChunks: false};
    for await (const chunk of stream) {
        out.chunks++;
        if (chunk.choices.length === 0 && chunk.usage)
            out.usage = chunk.usage;
        else if (chunk.usage)
            out.usageInOtherChunks = true;
        for (const c of chunk.choices) {
            out.text += c.delta.content || '';
            out.finish = c.finish_reason || out.finish;
        }
    }
    return out;
}

module.exports = {OpenAI, Anthropic, openai, anthropic, OPENAI_TOOL, ANTHROPIC_TOOL, collectChatStream};
