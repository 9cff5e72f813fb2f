'use strict';
/*
 * Only answers of the shape their endpoint promises are cached: a 2xx "{}"
 * or {"error": ...} from a gateway is relayed to the caller that got it but
 * never stored, or (in a shared namespace) one tenant's error would be served
 * to everyone. A good answer after it is cached as usual.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxyArgs: ['--shared-namespaces', 'public']});
const CHAT = '/v1/chat/completions';

const ODD = [
    ['an empty object', '{}'],
    ['an error member', '{"error":{"message":"quota exceeded","type":"insufficient_quota"}}'],
    ['another object', '{"object":"list","data":[]}'],
    ['no choices', '{"object":"chat.completion","choices":[]}'],
];

for (const [what, text] of ODD) {
    h.test(`a 200 with ${what} is relayed but not cached`, async () => {
        const body = h.chatBody(h.uniq('odd answer'));
        const shared = {'X-Cache-Namespace': 'public'};
        const before = await env.proxy.stats();
        const r = await env.proxy.post(CHAT, body, {...shared, 'x-mock-body': text});
        assert.equal(r.status, 200);
        assert.equal(r.text, text, 'relayed as the upstream sent it');
        const after = await env.proxy.stats();
        assert.equal(after.cache_store_skipped - before.cache_store_skipped, 1);
        assert.equal(after.cache_stores - before.cache_stores, 0);
        /* Another tenant asking the same in the shared namespace gets a real answer. */
        const other = await env.proxy.post(CHAT, body, {...shared, Authorization: 'Bearer sk-other'});
        assert.equal(other.headers['x-cache-status'], 'MISS');
        assert.equal(other.json.object, 'chat.completion');
        h.assertHit(await env.proxy.post(CHAT, body, shared));
    });
}

h.test('an Anthropic 200 of type error is not cached', async () => {
    const body = h.messagesBody(h.uniq('odd claude'));
    const text = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}';
    const r = await env.proxy.post('/v1/messages', body, {'x-mock-body': text});
    assert.equal(r.text, text);
    const again = await env.proxy.post('/v1/messages', body);
    assert.equal(again.headers['x-cache-status'], 'MISS');
    assert.equal(again.json.type, 'message');
});

/*
 * A hit in the other mode goes through cJSON, whose strings end at a decoded
 * U+0000: a JSON answer with "\u0000" in its text would stream to the next
 * client cut at the NUL ("before tail" for "before\u0000after tail"). Such
 * answers are relayed, never stored.
 */
h.test('an answer whose text contains \\u0000 is relayed but not cached', async () => {
    const body = h.chatBody(h.uniq('nul answer'));
    const text = '{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,' +
        '"message":{"role":"assistant","content":"before\\u0000after tail"},"finish_reason":"stop"}]}';
    const r = await env.proxy.post(CHAT, body, {'x-mock-body': text});
    assert.equal(r.text, text, 'relayed as the upstream sent it');
    const s = await env.proxy.post(CHAT, {...body, stream: true});
    if (s.headers['x-cache-status'] === 'HIT') {
        const streamed = h.assembleChat(h.parseSSE(s.text)).content;
        assert.equal(streamed, 'before\u0000after tail', 'the whole text, if served from the cache');
    }
    assert.notEqual(s.headers['x-cache-status'], 'HIT', 'not served from the cache');
});
