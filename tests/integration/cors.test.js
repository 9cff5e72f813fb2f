'use strict';
/*
 * CORS for browser clients (cors-origins): the proxy answers preflights
 * itself, allowing the SDKs' headers, and every answer to an allowed origin
 * carries the same Access-Control-* headers, hit or miss, stream or error,
 * in place of the upstream's. Off by default: then OPTIONS and the
 * upstream's CORS headers pass through as before.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const APP = 'https://app.example.com';
const env = h.environment({proxyArgs: ['--cors-origins', APP, '--cors-origins', 'http://localhost:3000']});
const CHAT = '/v1/chat/completions';
const MSG = '/v1/messages';

/* What the official SDKs send from a browser (openai dangerouslyAllowBrowser, anthropic the same). */
const SDK_HEADERS = ['authorization', 'content-type', 'x-stainless-os', 'x-stainless-lang',
    'x-stainless-retry-count', 'x-stainless-timeout', 'x-stainless-helper-method', 'anthropic-version',
    'x-api-key', 'anthropic-dangerous-direct-browser-access', 'openai-organization', 'x-cache-ttl'];

function preflight(proxy, origin, path, requestHeaders) {
    return proxy.request({method: 'OPTIONS', path, headers: {
        origin, 'access-control-request-method': 'POST',
        ...(requestHeaders ? {'access-control-request-headers': requestHeaders} : {}),
    }});
}

const corsOf = (r) => ({
    origin: r.headers['access-control-allow-origin'],
    vary: r.headers.vary,
    expose: r.headers['access-control-expose-headers'],
});

h.test('a preflight from an allowed origin is answered by the proxy with the SDKs\' headers', async () => {
    const calls = env.mock.callCount();
    const r = await preflight(env.proxy, APP, CHAT, SDK_HEADERS.join(', '));
    assert.equal(r.status, 204);
    assert.equal(r.headers['access-control-allow-origin'], APP);
    assert.match(r.headers['access-control-allow-methods'], /\bPOST\b/);
    const allowed = r.headers['access-control-allow-headers'].split(/,\s*/);
    assert.deepEqual(allowed.sort(), [...SDK_HEADERS].sort());
    assert.match(r.headers['access-control-max-age'], /^\d+$/);
    assert.match(r.headers.vary, /Origin/);
    assert.ok(r.headers['x-promptcache-request-id']);
    assert.equal(env.mock.callCount(), calls, 'never sent upstream');
    const s = await env.proxy.stats();
    assert.ok(s.cors_preflights >= 1);
});

h.test('a preflight from another origin is refused; unknown request headers are not allowed', async () => {
    const calls = env.mock.callCount();
    const bad = await preflight(env.proxy, 'https://evil.example', MSG, 'x-api-key');
    assert.equal(bad.status, 403);
    assert.equal(bad.headers['access-control-allow-origin'], undefined);
    assert.equal(bad.json.type, 'error', 'in the shape of the API behind the path');
    const partly = await preflight(env.proxy, 'http://localhost:3000', CHAT, 'authorization, x-evil-header');
    assert.equal(partly.status, 204);
    assert.equal(partly.headers['access-control-allow-headers'], 'authorization',
        'the browser then refuses the request');
    assert.equal(env.mock.callCount(), calls);
});

h.test('miss, hit, stream and error carry the same CORS headers; the upstream\'s are replaced', async () => {
    const body = h.chatBody(h.uniq('cors'));
    const origin = {origin: APP};
    const miss = await env.proxy.post(CHAT, body, {...origin, 'x-mock-header': 'Access-Control-Allow-Origin: *'});
    const hit = await env.proxy.post(CHAT, body, origin);
    const stream = await env.proxy.post(CHAT, {...body, stream: true}, origin);
    const error = await env.proxy.post(CHAT, {model: 'gpt-4o-mini'}, origin);
    const upstreamError = await env.proxy.post(CHAT, h.chatBody(h.uniq('cors 429')),
        {...origin, 'x-mock-status': '429'});
    assert.equal(miss.cache, 'MISS');
    assert.equal(hit.cache, 'HIT');
    assert.equal(error.status, 400);
    assert.equal(upstreamError.status, 429);
    const want = corsOf(miss);
    assert.equal(want.origin, APP, 'the upstream\'s "*" was replaced, not added to');
    assert.equal(want.vary, 'Origin');
    /* every response header of doc/caching.md's table (X-Cache-Verify was left out: browser code
     * could not read whether a held-back candidate agreed), and the SDKs' request ids */
    for (const name of ['X-Cache-Status', 'X-Cache-Match', 'X-Cache-Similarity', 'X-Cache-Verify', 'X-Cache-Key',
        'Age', 'X-Upstream', 'X-Promptcache-Request-Id', 'x-request-id', 'request-id'])
        assert.ok(want.expose.split(/,\s*/).includes(name), `exposes ${name}`);
    for (const r of [hit, stream, error, upstreamError])
        assert.deepEqual(corsOf(r), want);
    const other = await env.proxy.post(CHAT, body, {origin: 'https://evil.example'});
    assert.equal(other.status, 200, 'CORS is the browser\'s check; the proxy still answers');
    assert.equal(other.headers['access-control-allow-origin'], undefined);
    const none = await env.proxy.post(CHAT, body);
    assert.equal(none.headers['access-control-allow-origin'], undefined, 'no Origin, no CORS headers');
});

h.test('cors-origins *: any origin, without Vary', async () => {
    const p = await env.startProxy({args: ['--cors-origins', '*']});
    const pre = await preflight(p, 'https://anywhere.example', MSG, 'x-api-key, anthropic-version');
    assert.equal(pre.status, 204);
    assert.equal(pre.headers['access-control-allow-origin'], '*');
    const r = await p.post(MSG, h.messagesBody(h.uniq('star')), {origin: 'https://anywhere.example'});
    assert.equal(r.headers['access-control-allow-origin'], '*');
    assert.equal(r.headers.vary, undefined);
    await p.stop();
});

h.test('off by default: OPTIONS and the upstream\'s CORS headers pass through', async () => {
    const p = await env.startProxy();
    const calls = env.mock.callCount(CHAT);
    const pre = await preflight(p, APP, CHAT, 'authorization');
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'the preflight went upstream');
    assert.equal(pre.headers['access-control-allow-methods'], undefined);
    const r = await p.post(CHAT, h.chatBody(h.uniq('no cors')),
        {origin: APP, 'x-mock-header': 'Access-Control-Allow-Origin: *'});
    assert.equal(r.headers['access-control-allow-origin'], '*', 'the upstream\'s own');
    await p.stop();
});

h.test('cors-origins follows a config edit on SIGHUP (the file\'s list, space-separated)', async () => {
    const conf = path.join(h.tmpDir('pc-cors-'), 'promptcache.conf');
    fs.writeFileSync(conf, '');
    const p = await env.startProxy({config: conf});
    const before = await preflight(p, APP, CHAT, 'authorization');
    assert.equal(before.headers['access-control-allow-origin'], undefined, 'off: passed through');
    fs.writeFileSync(conf, `cors-origins http://localhost:3000 ${APP}\n`);
    const mark = p.proc.output.length;
    p.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload: every worker runs the new configuration/.test(p.proc.output.slice(mark)),
        {what: 'every worker on the new configuration'});
    /* every worker has it: each preflight is answered by the proxy (asking until one is would
     * hide a worker still on the old list) */
    for (let i = 0; i < 4; i++) {
        const after = await preflight(p, APP, CHAT, 'authorization');
        assert.equal(after.status, 204);
        assert.equal(after.headers['access-control-allow-origin'], APP);
    }
    await p.stop();
});

h.test('cors-origins values are checked', async () => {
    const r = await h.runCli(['-t', '--cors-origins', 'app.example.com/path']);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, /cors-origins.*not an origin/);
});
