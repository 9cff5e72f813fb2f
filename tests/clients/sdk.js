'use strict';
/*
 * sdk.js - the official clients, configured the way the client tests use
 * them: no retries (a retry would hide a failure and move call counts) and a
 * short timeout.
 */
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');

/* baseUrl: server root (the mock or the proxy), without /v1. opts: more client options. */
function openai(baseUrl, apiKey = 'sk-client-test-openai', opts = {}) {
    return new OpenAI({baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 30000, ...opts});
}

function anthropic(baseUrl, apiKey = 'sk-ant-client-test', opts = {}) {
    return new Anthropic({baseURL: baseUrl, apiKey, maxRetries: 0, timeout: 30000, ...opts});
}

/*
 * A fetch for the clients' `fetch` option that keeps the response headers of
 * every call, so that helpers which hide the HTTP response (the openai
 * stream helpers) can still be compared header for header.
 */
function recordingFetch() {
    const seen = [];
    const f = async (url, init) => {
        const res = await fetch(url, init);
        seen.push(Object.fromEntries(res.headers.entries()));
        return res;
    };
    f.last = () => seen[seen.length - 1];
    return f;
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

module.exports = {OpenAI, Anthropic, openai, anthropic, recordingFetch, OPENAI_TOOL, ANTHROPIC_TOOL,
    collectChatStream};
