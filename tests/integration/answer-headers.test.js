'use strict';
/*
 * What a client sees besides the body: a hit replays the upstream headers
 * that describe the generation (request ids, openai-model/-version/
 * -processing-ms), stored with the entry, and never those that describe the
 * original moment or account (Set-Cookie, rate limits, organisation); every
 * answer, hit, miss, bypass or error, carries X-Promptcache-Request-Id,
 * the id of its access log line; and an entry stored before headers were
 * kept (format 1) is still served.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const MSG = '/v1/messages';
const RESP = '/v1/responses';
const REPLAYED_OPENAI = ['x-request-id', 'openai-processing-ms', 'openai-model', 'openai-version'];
const NEVER = ['set-cookie', 'x-ratelimit-remaining-requests', 'openai-organization',
    'anthropic-organization-id', 'anthropic-ratelimit-requests-remaining'];

function assertReplayed(miss, hit, names) {
    for (const n of names) {
        assert.ok(miss.headers[n] !== undefined, `the miss has ${n}`);
        assert.equal(hit.headers[n], miss.headers[n], `the hit replays ${n}`);
    }
    for (const n of NEVER)
        assert.equal(hit.headers[n], undefined, `the hit has no ${n}`);
}

h.test('an OpenAI hit replays the request id and model headers, not cookies or rate limits', async () => {
    const body = h.chatBody(h.uniq('headers'));
    const miss = await env.proxy.post(CHAT, body);
    assert.equal(miss.cache, 'MISS');
    assert.equal(miss.headers['set-cookie'] !== undefined, true, 'the miss relays what the upstream sent');
    assert.ok(miss.headers['x-ratelimit-remaining-requests']);
    const hit = await env.proxy.post(CHAT, body);
    assert.equal(hit.cache, 'HIT');
    assertReplayed(miss, hit, REPLAYED_OPENAI);
    /* The same headers on a stream served from the JSON entry. */
    const s = await env.proxy.post(CHAT, {...body, stream: true});
    assert.equal(s.cache, 'HIT');
    assertReplayed(miss, s, REPLAYED_OPENAI);
});

h.test('a streamed Anthropic answer replays request-id on its hits, stream or JSON', async () => {
    const body = h.messagesBody(h.uniq('anthropic headers'), {stream: true});
    const miss = await env.proxy.post(MSG, body);
    assert.equal(miss.cache, 'MISS');
    assert.match(miss.headers['request-id'], /^req_mock\d+$/);
    for (const stream of [true, false]) {
        const hit = await env.proxy.post(MSG, {...body, stream});
        assert.equal(hit.cache, 'HIT');
        assertReplayed(miss, hit, ['request-id']);
    }
});

h.test('the Responses API replays its headers too', async () => {
    const body = {model: 'gpt-4.1-mini', input: h.uniq('responses headers')};
    const miss = await env.proxy.post(RESP, body);
    const hit = await env.proxy.post(RESP, body);
    assert.equal(hit.cache, 'HIT');
    assertReplayed(miss, hit, REPLAYED_OPENAI);
});

h.test('X-Promptcache-Request-Id names the access log line of every answer', async () => {
    const body = h.chatBody(h.uniq('request ids'));
    const answers = {
        miss: await env.proxy.post(CHAT, body),
        hit: await env.proxy.post(CHAT, body),
        bypass: await env.proxy.post(CHAT, body, {'X-Cache-Mode': 'off'}),
        proxyError: await env.proxy.post(CHAT, {model: 'gpt-4o-mini'}),
        badControl: await env.proxy.post(CHAT, body, {'X-Cache-TTL': 'soon'}),
        upstreamError: await env.proxy.post(CHAT, h.chatBody(h.uniq('500')), {'x-mock-status': '500'}),
        stream: await env.proxy.post(CHAT, h.chatBody(h.uniq('stream id'), {stream: true})),
        passthrough: await env.proxy.request({method: 'GET', path: '/v1/models'}),
    };
    const ids = new Set();
    for (const [what, r] of Object.entries(answers)) {
        const id = r.headers['x-promptcache-request-id'];
        assert.match(String(id), /^[0-9a-f]{18,}$/, `${what}: X-Promptcache-Request-Id`);
        ids.add(id);
        const line = await env.proxy.waitAccessLog((l) => l.id === id);
        assert.equal(line.status, r.status, `${what}: the log line of this answer`);
    }
    assert.equal(ids.size, Object.keys(answers).length, 'one id per request');
    assert.equal(answers.proxyError.status, 400);
    assert.equal(answers.upstreamError.status, 500);
});

h.test('a promptcache in front of another answers with its own request id only', async () => {
    const front = await env.startProxy({upstream: env.proxy.url, args: ['--cache', 'no']});
    const r = await front.post(CHAT, h.chatBody(h.uniq('two proxies')));
    assert.equal(r.status, 200);
    const id = r.headers['x-promptcache-request-id'];
    assert.equal(typeof id, 'string', 'one header, not a list of two');
    assert.ok(await front.waitAccessLog((l) => l.id === id), 'the front proxy\'s id');
    assert.equal(r.headers['x-cache-status'], 'BYPASS', 'and its own cache status');
    await front.stop();
});

/*
 * Rewrite an entry as the format before sections (1): the sections after the
 * body are cut off. Offsets per src/entry.c: content-type length at 45, then
 * the content type, the body length and the body.
 */
const TO_FORMAT_1 = `
local v = redis.call('GET', KEYS[1])
local function u(off, n) local x = 0 for i = n - 1, 0, -1 do x = x * 256 + string.byte(v, off + i + 1) end return x end
local ct = u(45, 2)
local stop = 47 + ct + 4 + u(47 + ct, 4)
redis.call('SET', KEYS[1], 'PCE' .. string.char(1) .. string.sub(v, 5, stop), 'PX', redis.call('PTTL', KEYS[1]))
return {string.byte(v, 4), #v - stop}`;

h.test('an entry in the format before sections is still served, without replayed headers', async () => {
    const cred = h.bearer(`sk-${h.uniq('format1').replace(' ', '-')}`);
    const body = h.chatBody(h.uniq('old entry'));
    const miss = await env.proxy.post(CHAT, body, cred);
    const line = await env.proxy.waitAccessLog((l) => l.id === miss.headers['x-promptcache-request-id']);
    const keys = await env.redis.keys(`pc:*:e:{${line.tenant}:*`);
    assert.equal(keys.length, 1);
    const [format, sectionBytes] = await env.redis.command('EVAL', TO_FORMAT_1, 1, keys[0]);
    assert.equal(format, 2, 'stored with a headers section');
    assert.ok(sectionBytes > 0);
    /* The entry was rewritten behind the proxies' back: read it from Redis, not from an L1. */
    const reader = await env.startProxy({args: ['--l1-size', '0']});
    const hit = await reader.post(CHAT, body, cred);
    assert.equal(hit.cache, 'HIT');
    assert.deepEqual(hit.json, miss.json);
    assert.equal(hit.headers['x-request-id'], undefined, 'nothing stored, nothing replayed');
    assert.ok(hit.headers['x-promptcache-request-id']);
    await reader.stop();
});
