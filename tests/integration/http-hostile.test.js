'use strict';
/*
 * Hostile request targets on the client-facing server, over raw sockets:
 * what a client spells in a request line must never take the proxy's call
 * (and the upstream-key it carries) outside the upstream base URL.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxy: false});

const KEY = 'sk-proxy-own-key';

/*
 * The upstream's base URL has a path (an AI gateway's account and gateway, an
 * Azure resource's /openai): the proxy appends the client's target to it. A
 * dot segment in the target was sent on as it came ("/gw/acct/../other/..."),
 * with the proxy's own upstream-key; the upstream, or a CDN or reverse proxy
 * in front of it, removes dot segments (RFC 3986 section 5.2.4), so the call
 * reached another account's path on that host. Now a 400, never forwarded.
 */
h.test('a target with a dot segment is refused, never sent under another path of the upstream', async () => {
    const p = await env.startProxy({upstream: `${env.mock.url}/gw/acct`, args: ['--upstream-key', KEY]});
    const targets = [
        '/../other/v1/models',
        '/v1/../../other/v1/models',
        '/./v1/models',
        '/%2e%2e/other/v1/models',
        '/.%2E/other/v1/models',
        '/..\\other/v1/models',
        'http://api.example/../other/v1/models',
    ];
    for (const target of targets) {
        const before = env.mock.callCount();
        const c = await h.RawConnection.open(p.port);
        /* Connection: close: an answer relayed from the upstream (chunked) ends with the connection. */
        const r = await c.roundtrip(`GET ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-client\r\n` +
            'Connection: close\r\n\r\n');
        c.close();
        assert.equal(r.status, 400, `${target}: ${r.body}`);
        assert.ok(r.json && r.json.error && r.json.error.message, `${target}: an error in the API's shape`);
        assert.equal(env.mock.callCount(), before, `${target}: the upstream got ${
            env.mock.requests.length ? env.mock.requests[env.mock.requests.length - 1].url : 'nothing'}`);
    }
    /* Dots that are no segment of their own, and any in the query, still go through, under the base path. */
    for (const [target, url] of [['/v1/models/..x?q=/../y', '/gw/acct/v1/models/..x?q=/../y'],
        ['/.well-known/x', '/gw/acct/.well-known/x']]) {
        const before = env.mock.callCount();
        const c = await h.RawConnection.open(p.port);
        await c.roundtrip(`GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
        c.close();
        assert.equal(env.mock.callCount(), before + 1, target);
        const got = env.mock.requests[env.mock.requests.length - 1];
        assert.equal(got.url, url);
        assert.equal(got.headers.authorization, `Bearer ${KEY}`);
    }
});
