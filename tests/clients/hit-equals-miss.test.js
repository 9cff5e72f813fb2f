'use strict';
/*
 * With the official SDKs, a cache HIT is indistinguishable from the MISS
 * that stored it, for every cached endpoint and helper: the objects the SDK
 * returns (including _request_id), the events a stream helper emits, and the
 * response headers, except those that are the cache's own (X-Cache-*, Age,
 * X-Upstream, X-Promptcache-Request-Id), describe the original moment or
 * account (Date, Set-Cookie, rate limits, organisation: never replayed), or
 * frame the bytes (a miss is relayed as it streams in, a hit is sent whole).
 * Uses the integration harness (real binary, real redis-server, mock).
 */
const assert = require('node:assert/strict');
const h = require('../integration/lib');
const sdk = require('./sdk');

const env = h.environment();

/* Headers a hit may not share with its miss, and why (see the top of this file). */
const MAY_DIFFER = [
    /^x-cache-/, /^age$/, /^x-upstream$/, /^x-promptcache-request-id$/,
    /^date$/, /^set-cookie$/, /^x-ratelimit-/, /^anthropic-ratelimit-/, /^openai-organization$/,
    /^anthropic-organization-id$/,
    /^content-length$/, /^transfer-encoding$/, /^connection$/, /^keep-alive$/, /^cache-control$/,
];
const mayDiffer = (name) => MAY_DIFFER.some((re) => re.test(name));

/* Every other header is the same, in both directions. */
function assertSameHeaders(miss, hit) {
    assert.equal(miss['x-cache-status'], 'MISS', 'the first call went upstream');
    assert.equal(hit['x-cache-status'], 'HIT', 'the second came from the cache');
    const keep = (hd) => Object.fromEntries(Object.entries(hd).filter(([k]) => !mayDiffer(k)));
    assert.deepEqual(keep(hit), keep(miss));
    assert.ok(miss['x-request-id'] || miss['request-id'], 'the upstream named its request');
}

/* A client whose raw response headers are recorded (the stream helpers hide them). */
function openai(key = `sk-${h.uniq('oa').replace(' ', '-')}`) {
    const fetch = sdk.recordingFetch();
    return {client: sdk.openai(env.proxy.url, key, {fetch}), fetch};
}

function anthropic(key = `sk-ant-${h.uniq('an').replace(' ', '-')}`) {
    const fetch = sdk.recordingFetch();
    return {client: sdk.anthropic(env.proxy.url, key, {fetch}), fetch};
}

/* Run call twice (miss, hit): both results and both responses' headers. */
async function twice(fetch, call) {
    const a = await call();
    const ha = fetch.last();
    const b = await call();
    const hb = fetch.last();
    assertSameHeaders(ha, hb);
    return [a, b];
}

/* Every event an SDK stream emits, in order, and its final object. */
async function drain(stream, final) {
    const events = [];
    for await (const ev of stream)
        events.push(ev);
    return {events, final: await final()};
}

const user = (content) => [{role: 'user', content}];

/* The stream helper adds its own parse of text parts and call arguments (null without a schema). */
const unparsed = (output) => output.map(({parsed_arguments: pa, ...i}) => (i.content
    ? {...i, content: i.content.map(({parsed, ...part}) => part)} : i));
const WEATHER = {type: 'function', name: 'get_weather', parameters: {type: 'object',
    properties: {city: {type: 'string'}}, required: ['city']}};

/* ------------------------------------------------------------------------ */
/* Responses API                                                             */

h.test('responses.create: the hit is the same Response, _request_id included', async () => {
    const {client, fetch} = openai();
    const body = {model: 'gpt-4.1-mini', instructions: 'Be brief.', input: h.uniq('sdk responses')};
    const [a, b] = await twice(fetch, () => client.responses.create(body));
    assert.match(a.output_text, /^mock answer #\d+ to: sdk responses/);
    assert.deepEqual(b, a);
    assert.match(b._request_id, /^req_mock\d+$/);
    assert.equal(b._request_id, a._request_id);
});

h.test('responses.stream: the same events and final response, tools and reasoning included', async () => {
    const {client, fetch} = openai();
    const body = {model: 'o4-mini', input: [{role: 'user', content: [{type: 'input_text', text: h.uniq('stream')}]}],
        tools: [WEATHER], reasoning: {effort: 'low', summary: 'auto'}};
    const run = () => {
        const s = client.responses.stream(body);
        return drain(s, () => s.finalResponse());
    };
    const [a, b] = await twice(fetch, run);
    assert.deepEqual(b.events, a.events);
    assert.deepEqual(b.final, a.final);
    assert.deepEqual(b.final.output.map((i) => i.type), ['reasoning', 'function_call']);
    assert.ok(b.final.usage.output_tokens_details.reasoning_tokens > 0);
});

h.test('responses: a stream helper over a JSON answer and create over a streamed one', async () => {
    const {client} = openai();
    const body = {model: 'gpt-4.1-mini', input: h.uniq('crossover'), reasoning: {summary: 'auto'}};
    const json = await client.responses.create(body);
    const s = client.responses.stream(body);
    const {events, final} = await drain(s, () => s.finalResponse());
    assert.deepEqual(unparsed(final.output), json.output);
    assert.deepEqual(final.usage, json.usage);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta);
    assert.ok(deltas.length > 1, 'the text arrives in pieces');
    assert.equal(deltas.join(''), json.output_text);
    assert.equal(events.at(-1).type, 'response.completed');

    const body2 = {model: 'gpt-4.1-mini', input: h.uniq('crossover 2'), tools: [WEATHER]};
    const s2 = client.responses.stream(body2);
    const streamed = await s2.finalResponse();
    const created = await client.responses.create(body2).withResponse();
    assert.equal(created.response.headers.get('x-cache-status'), 'HIT');
    assert.deepEqual(created.data.output, unparsed(streamed.output));
    assert.equal(created.data.id, streamed.id);
});

h.test('responses: previous_response_id chains on an id served from the cache', async () => {
    const {client} = openai();
    const q = h.uniq('chain');
    await client.responses.create({model: 'gpt-4.1-mini', input: q});
    const cached = await client.responses.create({model: 'gpt-4.1-mini', input: q}).withResponse();
    assert.equal(cached.response.headers.get('x-cache-status'), 'HIT');
    const next = await client.responses.create({model: 'gpt-4.1-mini', input: 'and then?',
        previous_response_id: cached.data.id});
    assert.equal(next.previous_response_id, cached.data.id);
    const err = await openai().client.responses.create({model: 'gpt-4.1-mini', input: 'not yours',
        previous_response_id: cached.data.id}).then(() => null, (e) => e);
    assert.ok(err instanceof sdk.OpenAI.NotFoundError, 'another tenant cannot chain on it');
});

/* ------------------------------------------------------------------------ */
/* Chat completions, legacy completions, embeddings                          */

h.test('chat.completions.stream helper: the same chunks and final completion', async () => {
    const {client, fetch} = openai();
    const body = {model: 'gpt-4o-mini', messages: user(h.uniq('helper')), stream_options: {include_usage: true}};
    const run = () => {
        const s = client.chat.completions.stream(body);
        return drain(s, () => s.finalChatCompletion());
    };
    const [a, b] = await twice(fetch, run);
    assert.deepEqual(b.events, a.events);
    assert.deepEqual(b.final, a.final);
    assert.ok(b.final.usage.total_tokens > 0);
});

h.test('chat.completions.create: _request_id on the hit too', async () => {
    const {client, fetch} = openai();
    const body = {model: 'gpt-4o-mini', messages: user(h.uniq('request id')), tools: [sdk.OPENAI_TOOL]};
    const [a, b] = await twice(fetch, () => client.chat.completions.create(body));
    assert.deepEqual(b, a);
    assert.equal(b._request_id, a._request_id);
    assert.ok(b._request_id);
});

h.test('completions (legacy) streamed: the same chunks; a JSON answer streams chunks like the live ones', async () => {
    const {client, fetch} = openai();
    const base = {model: 'gpt-3.5-turbo-instruct', max_tokens: 32};
    const usage = {stream_options: {include_usage: true}};
    const collect = async (body) => {
        const chunks = [];
        for await (const c of await client.completions.create(body))
            chunks.push(c);
        return chunks;
    };
    const streamed = {...base, ...usage, prompt: h.uniq('legacy'), stream: true};
    const [a, b] = await twice(fetch, () => collect(streamed));
    assert.deepEqual(b, a);
    assert.ok(a.at(-1).usage && a.at(-1).usage.total_tokens > 0, 'the usage chunk');

    const prompt = h.uniq('legacy json');
    const json = await client.completions.create({...base, prompt});
    const fromJson = await collect({...base, ...usage, prompt, stream: true});
    assert.equal(fetch.last()['x-cache-status'], 'HIT');
    const text = fromJson.map((c) => (c.choices[0] ? c.choices[0].text : '')).join('');
    assert.equal(text, json.choices[0].text);
    const finish = fromJson.filter((c) => c.choices[0] && c.choices[0].finish_reason);
    assert.deepEqual(finish.map((c) => c.choices[0].finish_reason), [json.choices[0].finish_reason]);
    assert.deepEqual(fromJson.at(-1).usage, json.usage);
    const shape = (c) => [Object.keys(c).sort(), c.choices.length ? Object.keys(c.choices[0]).sort() : []];
    assert.deepEqual(shape(fromJson[0]), shape(a[0]), 'a text chunk shaped like the upstream\'s');
    assert.deepEqual(shape(fromJson.at(-1)), shape(a.at(-1)), 'the usage chunk too');
    assert.equal(fromJson[0].id, json.id);
});

h.test('embeddings: floats (base64 on the wire), explicit base64 and float are served faithfully', async () => {
    const {client, fetch} = openai();
    const input = [h.uniq('emb a'), h.uniq('emb b')];
    /* The SDK asks for base64 by default and decodes it. */
    const [a, b] = await twice(fetch, () => client.embeddings.create({model: 'text-embedding-3-small', input}));
    assert.deepEqual(b, a);
    assert.equal(b._request_id, a._request_id);
    /* Asking for base64 explicitly is the same request on the wire: the same entry, as strings. */
    const d = await client.embeddings.create({model: 'text-embedding-3-small', input, encoding_format: 'base64'});
    assert.equal(fetch.last()['x-cache-status'], 'HIT');
    assert.equal(typeof d.data[0].embedding, 'string');
    assert.equal(d._request_id, a._request_id);
    const [e, f] = await twice(fetch, () => client.embeddings.create({model: 'text-embedding-3-small', input,
        encoding_format: 'float'}));
    assert.deepEqual(f, e);
    assert.ok(Array.isArray(f.data[0].embedding));
    /* The three forms carry the same vector. */
    const raw = Buffer.from(d.data[0].embedding, 'base64');
    const decoded = Array.from({length: raw.length / 4}, (_, i) => raw.readFloatLE(4 * i));
    assert.deepEqual(decoded, f.data[0].embedding);
    assert.deepEqual(Array.from(b.data[0].embedding), f.data[0].embedding);
});

/* ------------------------------------------------------------------------ */
/* Anthropic                                                                 */

h.test('messages.stream: the same events, final message and request id', async () => {
    const {client, fetch} = anthropic();
    const body = {model: 'claude-sonnet-4-5', max_tokens: 256, messages: user(h.uniq('claude helper')),
        tools: [sdk.ANTHROPIC_TOOL]};
    const run = async () => {
        const s = client.messages.stream(body);
        const {request_id: requestId} = await s.withResponse();
        const out = await drain(s, () => s.finalMessage());
        return {...out, requestId};
    };
    const [a, b] = await twice(fetch, run);
    assert.deepEqual(b.events, a.events);
    assert.deepEqual(b.final, a.final);
    assert.match(b.requestId, /^req_mock\d+$/);
    assert.equal(b.requestId, a.requestId);
});

h.test('messages.create: the hit is the same Message, _request_id included', async () => {
    const {client, fetch} = anthropic();
    const body = {model: 'claude-sonnet-4-5', max_tokens: 256, messages: user(h.uniq('claude json'))};
    const [a, b] = await twice(fetch, () => client.messages.create(body));
    assert.deepEqual(b, a);
    assert.equal(b._request_id, a._request_id);
    assert.ok(b._request_id);
});
