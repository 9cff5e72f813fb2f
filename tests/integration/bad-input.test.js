'use strict';
/*
 * Bad requests are rejected by the proxy itself with a 4xx in the shape of
 * the API that was called; nothing reaches the upstream, nothing is cached,
 * and the proxy keeps serving.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const MAX_BODY = 4096;
const env = h.environment({proxyArgs: ['--max-body-size', String(MAX_BODY)]});

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

/* Each case: what is wrong, the path, the body (object or raw text), headers, expected status. */
const CASES = [
    ['malformed JSON', CHAT, '{"model": "gpt-4o-mini", "messages": [', {}, 400],
    ['malformed JSON', MESSAGES, '{"model": "claude", max_tokens: 5}', {}, 400],
    ['a JSON array body', CHAT, '[1, 2, 3]', {}, 400],
    ['an empty body', CHAT, '', {}, 400],
    ['wrong content type', CHAT, JSON.stringify(h.chatBody('ct')), {'content-type': 'text/plain'}, 415],
    ['wrong content type', MESSAGES, JSON.stringify(h.messagesBody('ct')),
        {'content-type': 'application/x-www-form-urlencoded'}, 415],
    ['missing model', CHAT, {messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['missing model', MESSAGES, {max_tokens: 5, messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['an empty model', CHAT, {model: '', messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['missing messages', CHAT, {model: 'gpt-4o-mini'}, {}, 400],
    ['missing messages', MESSAGES, {model: 'claude-sonnet-4-5', max_tokens: 5}, {}, 400],
    ['messages not an array', CHAT, {model: 'gpt-4o-mini', messages: 'hello'}, {}, 400],
    ['an empty messages array', MESSAGES, {model: 'claude-sonnet-4-5', max_tokens: 5, messages: []}, {}, 400],
    ['missing prompt', '/v1/completions', {model: 'gpt-3.5-turbo-instruct'}, {}, 400],
    ['missing input', '/v1/embeddings', {model: 'text-embedding-3-small'}, {}, 400],
    ['stream not a boolean', CHAT, {...h.chatBody('s'), stream: 'yes'}, {}, 400],
    ['a body over max-body-size', CHAT, h.chatBody('x'.repeat(MAX_BODY * 2)), {}, 413],
    ['a body over max-body-size', MESSAGES, h.messagesBody('x'.repeat(MAX_BODY * 2)), {}, 413],
];

for (const [what, path, body, headers, status] of CASES) {
    h.test(`${path}: ${what} -> ${status} in the API's shape, twice, upstream untouched`, async () => {
        const calls = env.mock.callCount();
        for (let i = 0; i < 2; i++) {
            const r = await env.proxy.post(path, body, headers);
            h.assertApiError(r, path, status);
        }
        assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    });
}

h.test('a chunked body over max-body-size is a 413 too', async () => {
    const http = require('node:http');
    const status = await new Promise((resolve, reject) => {
        const req = http.request(`${env.proxy.url}${CHAT}`, {
            method: 'POST', agent: false,
            headers: {'content-type': 'application/json', authorization: `Bearer ${h.DEFAULT_KEY}`},
        }, (res) => {
            res.resume();
            resolve(res.statusCode);
        });
        req.on('error', reject);
        /* No Content-Length: node sends it chunked, so the limit applies while reading. */
        for (let i = 0; i < 4; i++)
            req.write('{"pad":"' + 'y'.repeat(MAX_BODY) + '",');
        req.end('"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}');
    }).catch((e) => e);
    /* A proxy may also close the connection once the limit is hit; a 2xx never. */
    if (!(status instanceof Error))
        assert.equal(status, 413);
});

h.test('the proxy keeps serving and counts client errors', async () => {
    const stats = await env.proxy.stats();
    assert.ok(stats.client_errors >= CASES.length, `client_errors ${stats.client_errors}`);
    assert.equal(stats.cache_stores, 0, 'no bad request was stored');
    const body = h.chatBody(h.uniq('after bad input'));
    const ok = await env.proxy.post(CHAT, body);
    assert.equal(ok.status, 200);
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('a method other than POST on an API path does not reach the cache', async () => {
    const r = await env.proxy.request({method: 'GET', path: CHAT});
    assert.notEqual(r.status, 200);
    assert.notEqual(r.headers['x-cache-status'], 'HIT');
});
