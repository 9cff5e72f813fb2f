'use strict';
/*
 * The official OpenAI and Anthropic SDKs through promptcache: the second of
 * two identical calls is a cache HIT (read from the x-cache-status response
 * header via .withResponse()) with the same content, for JSON and streamed
 * answers; errors the proxy generates surface as the SDK's BadRequestError
 * with the proxy's message. Uses the integration harness (real binary, real
 * redis-server, mock upstream).
 */
const assert = require('node:assert/strict');
const h = require('../integration/lib');
const sdk = require('./sdk');

const env = h.environment();

const cacheStatus = (response) => response.headers.get('x-cache-status');
const user = (content) => [{role: 'user', content}];

/* Run call twice; the first must be a MISS and the second a HIT. Returns both results. */
async function twice(call) {
    const first = await call();
    assert.equal(cacheStatus(first.response), 'MISS', 'first call goes upstream');
    const second = await call();
    assert.equal(cacheStatus(second.response), 'HIT', 'second call comes from the cache');
    return [first, second];
}

h.test('openai: chat completion twice, second is a HIT with the same content', async () => {
    const oa = sdk.openai(env.proxy.url);
    const body = {model: 'gpt-4o-mini', messages: user(h.uniq('sdk chat'))};
    const calls = env.mock.callCount();
    const [a, b] = await twice(() => oa.chat.completions.create(body).withResponse());
    assert.equal(b.data.choices[0].message.content, a.data.choices[0].message.content);
    assert.deepEqual(b.data.usage, a.data.usage);
    assert.equal(env.mock.callCount(), calls + 1);
});

h.test('openai: streamed chat with include_usage twice, second is a HIT', async () => {
    const oa = sdk.openai(env.proxy.url);
    const body = {model: 'gpt-4o-mini', messages: user(h.uniq('sdk stream')), stream: true,
        stream_options: {include_usage: true}};
    const run = async () => {
        const {data, response} = await oa.chat.completions.create(body).withResponse();
        return {response, got: await sdk.collectChatStream(data)};
    };
    const [a, b] = await twice(run);
    assert.match(a.got.text, /^mock answer #\d+ to: sdk stream/);
    assert.equal(b.got.text, a.got.text, 'the SDK assembles the same text');
    assert.equal(b.got.finish, 'stop');
    assert.ok(b.got.usage && b.got.usage.total_tokens > 0, 'usage chunk replayed');
    assert.deepEqual(b.got.usage, a.got.usage);
});

h.test('openai: stream helper gets the cached answer of a JSON call', async () => {
    const oa = sdk.openai(env.proxy.url);
    const body = {model: 'gpt-4o-mini', messages: user(h.uniq('sdk json then helper'))};
    const json = await oa.chat.completions.create(body);
    const stream = oa.chat.completions.stream(body);
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0].message.content, json.choices[0].message.content);
});

h.test('openai: embeddings twice, second is a HIT with the same vectors', async () => {
    const oa = sdk.openai(env.proxy.url);
    const body = {model: 'text-embedding-3-small', input: [h.uniq('sdk emb a'), h.uniq('sdk emb b')]};
    const [a, b] = await twice(() => oa.embeddings.create(body).withResponse());
    assert.equal(b.data.data.length, 2);
    assert.deepEqual(b.data.data.map((d) => d.embedding), a.data.data.map((d) => d.embedding));
});

h.test('anthropic: messages.create twice, second is a HIT with the same content', async () => {
    const an = sdk.anthropic(env.proxy.url);
    const body = {model: 'claude-sonnet-4-5', max_tokens: 256, messages: user(h.uniq('sdk claude'))};
    const [a, b] = await twice(() => an.messages.create(body).withResponse());
    assert.deepEqual(b.data.content, a.data.content);
    assert.equal(b.data.stop_reason, 'end_turn');
    assert.deepEqual(b.data.usage, a.data.usage);
});

h.test('anthropic: messages.stream twice, finalMessage equal, second is a HIT', async () => {
    const an = sdk.anthropic(env.proxy.url);
    const body = {model: 'claude-sonnet-4-5', max_tokens: 256, messages: user(h.uniq('sdk claude stream')),
        tools: [sdk.ANTHROPIC_TOOL]};
    const run = async () => {
        const stream = an.messages.stream(body);
        const {response} = await stream.withResponse();
        return {response, msg: await stream.finalMessage()};
    };
    const [a, b] = await twice(run);
    assert.deepEqual(b.msg.content, a.msg.content);
    assert.equal(b.msg.stop_reason, 'tool_use');
    assert.equal(b.msg.usage.output_tokens, a.msg.usage.output_tokens);
    assert.equal(b.msg.usage.input_tokens, a.msg.usage.input_tokens);
});

h.test('a proxy-generated 400 surfaces as openai.BadRequestError with the proxy\'s message', async () => {
    const oa = sdk.openai(env.proxy.url);
    const calls = env.mock.callCount();
    const err = await oa.chat.completions.create({model: 'gpt-4o-mini', messages: user('bad ttl')},
        {headers: {'X-Cache-TTL': 'not-a-number'}}).then(() => null, (e) => e);
    assert.ok(err instanceof sdk.OpenAI.BadRequestError, `got ${err}`);
    assert.equal(err.status, 400);
    assert.equal(typeof err.error.message, 'string');
    assert.ok(err.message.includes(err.error.message), 'the SDK shows the proxy\'s message');
    assert.equal(env.mock.callCount(), calls, 'the proxy answered by itself');
});

h.test('a proxy-generated 400 surfaces as anthropic.BadRequestError with the proxy\'s message', async () => {
    const an = sdk.anthropic(env.proxy.url);
    const calls = env.mock.callCount();
    const err = await an.messages.create({model: 'claude-sonnet-4-5', max_tokens: 5, messages: user('bad ttl')},
        {headers: {'X-Cache-TTL': 'not-a-number'}}).then(() => null, (e) => e);
    assert.ok(err instanceof sdk.Anthropic.BadRequestError, `got ${err}`);
    assert.equal(err.status, 400);
    assert.equal(err.error.type, 'error');
    assert.equal(err.error.error.type, 'invalid_request_error');
    assert.ok(err.message.includes(err.error.error.message), 'the SDK shows the proxy\'s message');
    assert.equal(env.mock.callCount(), calls, 'the proxy answered by itself');
});
