'use strict';
/*
 * What the HTTP server refuses on its own, in its JSON error shape:
 *   - an HTTP/1.1 request without exactly one valid Host header (400, close);
 *   - connections beyond max-connections (all workers together) or beyond
 *     max-connections-per-ip: 503 with Retry-After, except that /healthz and
 *     /readyz are still answered from a small reserve, so a load balancer
 *     does not take a busy proxy for a dead one. Refusals are counted.
 * Connections are held with raw sockets; a regular connection is told from
 * a reserve one by keep-alive (the reserve always closes after its answer).
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxy: false});

const CHAT = '/v1/chat/completions';

function get(path, extra = '') {
    return `GET ${path} HTTP/1.1\r\nHost: proxy.test\r\n${extra}\r\n`;
}

/*
 * A connection admitted as a regular one: /healthz answered with keep-alive.
 * A place freed a moment ago may not be given back yet: try again until then.
 */
function openRegular(proxy, opts) {
    return h.waitFor(async () => {
        const c = await h.RawConnection.open(proxy.port, opts);
        const r = await c.roundtrip(get('/healthz'));
        assert.equal(r.status, 200);
        if (r.headers.connection === 'keep-alive')
            return c;
        c.close();
        return null;
    }, {what: 'a regular (keep-alive) connection'});
}

/* One request on a new connection; the connection is closed afterwards. */
async function once(proxy, text, opts) {
    const c = await h.RawConnection.open(proxy.port, opts);
    try {
        const r = await c.roundtrip(text);
        r.closed = await c.closedByServer();
        return r;
    } finally {
        c.close();
    }
}

/* httpd's 503 in the shape of the API behind the path (Anthropic's for /v1/messages). */
/*
 * Wait until the proxy holds no connection but the one asking (from another
 * address): the harness's own probes (/healthz, /readyz) may still be closing.
 */
async function quiesce(proxy) {
    await h.waitFor(async () => {
        const c = await h.RawConnection.open(proxy.port, {localAddress: '127.0.0.3'});
        try {
            return JSON.parse((await c.roundtrip(get('/stats'))).body).connections_active === 1;
        } finally {
            c.close();
        }
    }, {what: 'the harness connections to close'});
}

function assertBusy(r, anthropic = false) {
    assert.equal(r.status, 503, r.body);
    assert.equal(r.headers['retry-after'], '1');
    assert.equal(r.headers.connection, 'close');
    if (anthropic)
        assert.ok(r.json && r.json.type === 'error' && r.json.error.type === 'api_error', r.body);
    else
        assert.ok(r.json && r.json.error && r.json.error.type === 'server_error', r.body);
    assert.match(r.json.error.message, /too many connections/);
    assert.ok(r.closed, 'the connection is closed after the 503');
}

function assertHealthFromReserve(r, status = 200) {
    assert.equal(r.status, status, r.body);
    assert.equal(r.headers.connection, 'close', 'the reserve closes after answering');
    assert.ok(r.closed);
}

h.test('HTTP/1.1 without Host, or with two, is a 400 and the connection closes', async () => {
    const proxy = await env.startProxy();
    const calls = env.mock.callCount();
    const body = JSON.stringify(h.chatBody(h.uniq('no host')));
    const bad = [
        'GET /healthz HTTP/1.1\r\n\r\n',
        'GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n',
        'GET /healthz HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n',
        'GET /healthz HTTP/1.1\r\nHost: user@evil.example\r\n\r\n',
        `POST ${CHAT} HTTP/1.1\r\nAuthorization: Bearer ${h.DEFAULT_KEY}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
    ];
    for (const text of bad) {
        const r = await once(proxy, text);
        assert.equal(r.status, 400, `${JSON.stringify(text.slice(0, 60))}: ${r.body}`);
        assert.equal(r.headers.connection, 'close');
        assert.equal(r.json.error.type, 'invalid_request_error');
        assert.match(r.json.error.message, /Host/);
        assert.ok(r.closed);
    }
    /* In the shape of the API behind the path. */
    const anthropic = await once(proxy, 'POST /v1/messages HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}');
    assert.equal(anthropic.status, 400);
    assert.equal(anthropic.json.type, 'error');
    assert.equal(anthropic.json.error.type, 'invalid_request_error');
    assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    /* HTTP/1.0 may leave Host out. */
    const old = await once(proxy, 'GET /healthz HTTP/1.0\r\n\r\n');
    assert.equal(old.status, 200);
    assert.equal(proxy.alive, true);
});

h.test('max-connections is one cap for all workers; health checks still answered beyond it', async () => {
    const MAX = 12;
    const proxy = await env.startProxy({workers: 2, args: ['--max-connections', String(MAX)]});
    await quiesce(proxy);
    const held = [];
    try {
        for (let i = 0; i < MAX; i++)
            held.push(await openRegular(proxy));
        /* Per worker the cap would leave room for 12 more: it is the process's. */
        assertHealthFromReserve(await once(proxy, get('/healthz')));
        assertHealthFromReserve(await once(proxy, get('/readyz')));
        assertBusy(await once(proxy, get('/v1/models')));
        const body = JSON.stringify(h.chatBody(h.uniq('over the cap')));
        assertBusy(await once(proxy, `POST ${CHAT} HTTP/1.1\r\nHost: p\r\nContent-Type: application/json\r\n` +
            `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`));
        const msg = JSON.stringify(h.messagesBody(h.uniq('over the cap')));
        assertBusy(await once(proxy, `POST /v1/messages HTTP/1.1\r\nHost: p\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(msg)}\r\n\r\n${msg}`), true);
        /* The held connections still work. */
        const r = await held[0].roundtrip(get('/healthz'));
        assert.equal(r.status, 200);
        assert.equal(r.headers.connection, 'keep-alive');
    } finally {
        held.forEach((c) => c.close());
    }
    /* Closed ones give their places back. */
    await h.waitFor(async () => {
        const c = await h.RawConnection.open(proxy.port);
        const r = await c.roundtrip(get('/healthz'));
        c.close();
        return r.headers.connection === 'keep-alive';
    }, {what: 'a regular connection again'});
    const stats = await proxy.stats();
    assert.equal(stats.connections_refused, 3, 'the three 503s were counted');
    assert.equal(stats.connections_refused_per_ip, 0);
});

h.test('max-connections-per-ip limits one address, not the others', async () => {
    const PER_IP = 3;
    const proxy = await env.startProxy({args: ['--max-connections-per-ip', String(PER_IP)]});
    await quiesce(proxy);
    const held = [];
    try {
        for (let i = 0; i < PER_IP; i++)
            held.push(await openRegular(proxy, {localAddress: '127.0.0.1'}));
        assertBusy(await once(proxy, get('/v1/models'), {localAddress: '127.0.0.1'}));
        assertHealthFromReserve(await once(proxy, get('/healthz'), {localAddress: '127.0.0.1'}));
        /* Another client address is not affected. */
        const other = await openRegular(proxy, {localAddress: '127.0.0.2'});
        const r = await other.roundtrip(get('/healthz'));
        assert.equal(r.headers.connection, 'keep-alive');
        const stats = JSON.parse((await other.roundtrip(get('/stats'))).body);
        assert.equal(stats.connections_refused_per_ip, 1);
        assert.equal(stats.connections_refused, 1);
        other.close();
    } finally {
        held.forEach((c) => c.close());
    }
});
