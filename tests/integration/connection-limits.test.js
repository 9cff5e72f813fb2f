'use strict';
/*
 * What the HTTP server refuses on its own, in its JSON error shape:
 *   - an HTTP/1.1 request without exactly one valid Host header (400, close);
 *   - connections beyond max-connections (all workers together) or beyond
 *     max-connections-per-ip: 503 with Retry-After, except that /healthz,
 *     /readyz and /metrics are still answered from a small reserve, so a load
 *     balancer does not take a busy proxy for a dead one. Refusals are counted.
 *   - the reserve cannot be held against health checks: not by idle
 *     connections kept open beyond it, nor by a churn of new ones (issue 20,
 *     point 7: 8 of 20 and 16 of 20 checks failed);
 *   - max-connections-per-ip is on by default, and leaves loopback (and
 *     max-connections-per-ip-exempt) alone.
 * Connections are held with raw sockets; a regular connection is told from
 * a reserve one by keep-alive (the reserve always closes after its answer).
 */
const assert = require('node:assert/strict');
const net = require('node:net');
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
    /* Loopback is exempt by default: the test's addresses are limited only with the list emptied. */
    const proxy = await env.startProxy({args: ['--max-connections-per-ip', String(PER_IP),
        '--max-connections-per-ip-exempt', '']});
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

/*
 * Connections that never send a byte, opened `count` at a time; each one the
 * proxy closes is opened again (what a client holding every place it can
 * get does). stop() closes them all.
 */
function holdIdle(port, count) {
    let stopped = false;
    const socks = new Set();
    const open = () => {
        if (stopped)
            return;
        const s = net.connect({host: '127.0.0.1', port});
        socks.add(s);
        s.on('error', () => {});
        s.on('close', () => {
            socks.delete(s);
            setImmediate(open);
        });
    };
    for (let i = 0; i < count; i++)
        open();
    return {stop: () => {
        stopped = true;
        socks.forEach((s) => s.destroy());
    }};
}

/*
 * New connections that never send a byte, about perSecond of them a second
 * until stop(), none opened again: a churn of connections that each hold a
 * place until the proxy closes it.
 */
function churnIdle(port, perSecond) {
    const socks = new Set();
    const timer = setInterval(() => {
        for (let i = 0; i < perSecond / 100 && socks.size < 1000; i++) {
            const s = net.connect({host: '127.0.0.1', port});
            socks.add(s);
            s.on('error', () => {});
            s.on('close', () => socks.delete(s));
        }
    }, 10);
    return {stop: () => {
        clearInterval(timer);
        socks.forEach((s) => s.destroy());
    }};
}

/* Health checks one after the other, each on a new connection: the failures, described. */
async function healthChecks(proxy, n) {
    const failed = [];
    for (let i = 0; i < n; i++) {
        const path = ['/healthz', '/readyz', '/metrics'][i % 3];
        try {
            const r = await once(proxy, get(path));
            if (r.status !== 200)
                failed.push(`${path}: ${r.status}`);
        } catch (e) {
            failed.push(`${path}: ${e.message}`);
        }
    }
    return failed;
}

/* /stats through a held regular connection (a new one would land in the reserve). */
async function statsVia(conn) {
    return JSON.parse((await conn.roundtrip(get('/stats'))).body);
}

h.test('idle connections held beyond the reserve do not lock health checks out', async () => {
    const MAX = 4;
    const proxy = await env.startProxy({workers: 2, args: ['--max-connections', String(MAX)]});
    await quiesce(proxy);
    const held = [];
    let idle = null;
    try {
        for (let i = 0; i < MAX; i++)
            held.push(await openRegular(proxy));
        /* 40 more than max-connections: the reserve (32) is full, and more wait to get in. */
        idle = holdIdle(proxy.port, 40);
        await h.waitFor(async () => (await statsVia(held[0])).connections_refused >= 8,
            {what: 'the idle connections to fill the reserve and be refused beyond it'});
        const failed = await healthChecks(proxy, 20);
        assert.deepEqual(failed, [], `${failed.length} of 20 health checks failed`);
        const stats = await statsVia(held[0]);
        assert.ok(stats.connections_active <= MAX + 32 + 1, `reserve bounded: ${stats.connections_active}`);
    } finally {
        if (idle)
            idle.stop();
        held.forEach((c) => c.close());
    }
    assert.equal(proxy.alive, true);
});

h.test('a churn of new idle connections does not lock health checks out', async () => {
    const MAX = 4;
    const proxy = await env.startProxy({workers: 2, args: ['--max-connections', String(MAX)]});
    await quiesce(proxy);
    const held = [];
    let churn = null;
    try {
        for (let i = 0; i < MAX; i++)
            held.push(await openRegular(proxy));
        const before = (await statsVia(held[0])).connections_refused;
        churn = churnIdle(proxy.port, 100);
        await h.waitFor(async () => (await statsVia(held[0])).connections_refused >= before + 8,
            {what: 'the churn to fill the reserve and be refused beyond it'});
        const failed = await healthChecks(proxy, 20);
        assert.deepEqual(failed, [], `${failed.length} of 20 health checks failed`);
    } finally {
        if (churn)
            churn.stop();
        held.forEach((c) => c.close());
    }
    assert.equal(proxy.alive, true);
});

h.test('max-connections-per-ip is on by default; loopback and exempt addresses are not limited', async () => {
    const dump = await h.runCli(['-T']);
    assert.match(dump.stdout, /^max-connections-per-ip 1000\b/m);
    assert.match(dump.stdout, /^max-connections-per-ip-exempt 127\.0\.0\.0\/8\b/m);
    assert.match(dump.stdout, /^max-connections-per-ip-exempt ::1\b/m);
    /* A limit of 2: loopback (the default exemption) is not limited... */
    const proxy = await env.startProxy({args: ['--max-connections-per-ip', '2']});
    await quiesce(proxy);
    const held = [];
    try {
        for (let i = 0; i < 4; i++)
            held.push(await openRegular(proxy, {localAddress: '127.0.0.1'}));
        assert.equal((await statsVia(held[0])).connections_refused_per_ip, 0);
    } finally {
        held.forEach((c) => c.close());
    }
    /* ... and with the exemption set to one address, the others are. */
    const strict = await env.startProxy({args: ['--max-connections-per-ip', '2',
        '--max-connections-per-ip-exempt', '127.0.0.2']});
    await quiesce(strict);
    const mine = [];
    try {
        for (let i = 0; i < 2; i++)
            mine.push(await openRegular(strict, {localAddress: '127.0.0.1'}));
        assertBusy(await once(strict, get('/v1/models'), {localAddress: '127.0.0.1'}));
        for (let i = 0; i < 4; i++)
            mine.push(await openRegular(strict, {localAddress: '127.0.0.2'}));
        assert.equal((await statsVia(mine[0])).connections_refused_per_ip, 1);
    } finally {
        mine.forEach((c) => c.close());
    }
});
