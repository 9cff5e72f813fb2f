'use strict';
/*
 * A request must not reach a paid upstream more often than the client sent
 * it. libcurl resends a request on its own when a reused keep-alive
 * connection dies before the response (up to 5 times: one POST could be six
 * billed generations). The proxy allows one resend, and only when the
 * connection was dead before anything of the request was written.
 *
 * The upstream here is a raw TCP server (no HTTP library) so that it can
 * misbehave exactly: read a request and reset the connection, or close an
 * idle keep-alive connection just before the proxy reuses it. One worker, so
 * that every call goes through the same connection pool.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');

const env = h.environment({proxy: false});

const CHAT = '/v1/chat/completions';
const ANSWER = JSON.stringify({
    id: 'chatcmpl-raw', object: 'chat.completion', model: 'raw',
    choices: [{index: 0, message: {role: 'assistant', content: 'ok'}, finish_reason: 'stop'}],
});

/*
 * The misbehaving upstream. Every complete request is recorded (its body);
 * what happens next is decided by behave(req, conn): 'answer' (200,
 * keep-alive), 'hold' (answer later, see releaseHeld), 'reset' (RST at once),
 * 'not-http' (a line of another protocol, then close)
 * or 'answer-close' (200, then close the connection: an idle keep-alive
 * connection closed just before it is reused).
 */
function rawUpstream(behave) {
    const up = {requests: [], held: [], connections: 0, closedIdle: 0, sockets: new Set()};
    up.server = net.createServer((sock) => {
        up.connections++;
        up.sockets.add(sock);
        const conn = {sock, served: 0, buf: Buffer.alloc(0)};
        sock.on('close', () => up.sockets.delete(sock));
        sock.on('error', () => { /* resets are what this server is for */ });
        sock.on('data', (d) => {
            conn.buf = Buffer.concat([conn.buf, d]);
            for (let req; (req = takeRequest(conn));)
                handle(up, conn, req, behave(req, conn));
        });
    });
    up.listen = () => new Promise((resolve) => up.server.listen(0, '127.0.0.1', () => {
        up.url = `http://127.0.0.1:${up.server.address().port}`;
        resolve(up);
    }));
    up.releaseHeld = () => up.held.splice(0).forEach((c) => answer(c));
    up.close = () => {
        up.sockets.forEach((s) => s.destroy());
        return new Promise((resolve) => up.server.close(resolve));
    };
    up.count = (marker) => up.requests.filter((r) => r.body.includes(marker)).length;
    return up;
}

/* One whole request (head and Content-Length body) from conn.buf, or null. */
function takeRequest(conn) {
    const end = conn.buf.indexOf('\r\n\r\n');
    if (end < 0)
        return null;
    const head = conn.buf.subarray(0, end).toString('latin1');
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    const len = m ? Number(m[1]) : 0;
    if (conn.buf.length < end + 4 + len)
        return null;
    const body = conn.buf.subarray(end + 4, end + 4 + len).toString('utf8');
    conn.buf = conn.buf.subarray(end + 4 + len);
    return {line: head.split('\r\n')[0], body};
}

function answer(conn, close = false) {
    conn.served++;
    conn.sock.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(ANSWER)}\r\n` +
        `Connection: ${close ? 'close' : 'keep-alive'}\r\n\r\n${ANSWER}`);
}

function handle(up, conn, req, what) {
    up.requests.push(req);
    if (what === 'hold') {
        up.held.push(conn);
    } else if (what === 'not-http') {
        /* Another protocol on that port (a wrong port in the upstream URL). */
        conn.sock.end('SSH-2.0-OpenSSH_9.2\r\n');
    } else if (what === 'reset') {
        conn.sock.resetAndDestroy();
    } else if (what === 'reset-and-die') {
        /* The replica's process dies with the request read: the connection is reset and
           nothing listens any more (a new connection is refused). */
        up.server.close();
        up.sockets.forEach((s) => s.resetAndDestroy());
    } else if (what === 'answer-close') {
        /* The answer says keep-alive; the connection is closed as soon as it is written. */
        answer(conn);
        conn.sock.end(() => {
            up.closedIdle++;
            conn.sock.destroy();
        });
    } else {
        answer(conn);
    }
}

async function startProxyFor(up) {
    return env.startProxy({upstream: up.url, workers: 1, args: ['--upstream-timeout', '10']});
}

function post(proxy, marker) {
    return proxy.post(CHAT, h.chatBody(marker), {'x-cache-mode': 'off'});
}

h.test('a request the upstream read before resetting is never sent again (was: 6 times)', async () => {
    const POOL = 6;
    let armed = false;
    const up = await rawUpstream((req) => {
        if (armed)
            return 'reset';
        return 'hold'; /* warm-up: held until POOL are in flight, one connection each */
    }).listen();
    try {
        const proxy = await startProxyFor(up);
        const warm = Array.from({length: POOL}, (_, i) => post(proxy, h.uniq(`warm ${i}`)));
        await h.waitFor(() => up.held.length === POOL, {what: `${POOL} warm-up requests in flight`});
        up.releaseHeld();
        for (const r of await Promise.all(warm))
            assert.equal(r.status, 200, r.text);
        assert.equal(up.connections, POOL, 'the pool holds one connection per warm-up request');

        armed = true;
        const marker = h.uniq('bill me once');
        const r = await post(proxy, marker);
        assert.equal(r.status, 502, r.text);
        h.assertOpenAIError(r, 502);
        assert.equal(up.count(marker), 1, 'the upstream received the request exactly once');
        const stats = await proxy.stats();
        assert.equal(stats.upstream_retries, 0);
        /* written before the 502, but the log pipe may be read after the answer came */
        await h.waitFor(() => proxy.stderr.includes('not resent'), {what: 'the log to say why'});
    } finally {
        await up.close();
    }
});

h.test('an idle keep-alive connection closed just before reuse costs nothing', async () => {
    const up = await rawUpstream(() => 'answer-close').listen();
    try {
        const proxy = await startProxyFor(up);
        for (let i = 0; i < 5; i++) {
            const closedBefore = up.closedIdle;
            const marker = h.uniq(`idle close ${i}`);
            const r = await post(proxy, marker);
            assert.equal(r.status, 200, r.text);
            assert.equal(up.count(marker), 1, `request ${i} reached the upstream once`);
            /* The upstream closes the connection the answer promised to keep; the next call comes after. */
            await h.waitFor(() => up.closedIdle > closedBefore, {what: 'the upstream to close the idle connection'});
        }
        const stats = await proxy.stats();
        assert.equal(stats.upstream_errors, 0);
    } finally {
        await up.close();
    }
});

h.test('an idle keep-alive connection reset just before reuse costs nothing either', async () => {
    let resetIdle = null;
    const up = await rawUpstream((req, conn) => {
        resetIdle = conn;
        return 'answer';
    }).listen();
    try {
        const proxy = await startProxyFor(up);
        for (let i = 0; i < 5; i++) {
            const marker = h.uniq(`idle reset ${i}`);
            const r = await post(proxy, marker);
            assert.equal(r.status, 200, r.text);
            assert.equal(up.count(marker), 1, `request ${i} reached the upstream once`);
            /* RST on the idle connection the proxy will pick for the next call. */
            const sock = resetIdle.sock;
            await new Promise((resolve) => {
                sock.once('close', resolve);
                sock.resetAndDestroy();
            });
        }
        assert.equal((await proxy.stats()).upstream_errors, 0);
    } finally {
        await up.close();
    }
});

h.test('an upstream that answers in another protocol is a 502 counted against that replica', async () => {
    const up = await rawUpstream(() => 'not-http').listen();
    try {
        const proxy = await startProxyFor(up);
        const r = await post(proxy, h.uniq('wrong port'));
        h.assertOpenAIError(r, 502);
        assert.match(r.json.error.message, /HTTP\/0\.9/, r.text);
        const st = await proxy.stats();
        assert.equal(st.upstream_errors, 1);
        assert.equal(st.replicas[0].errors, 1, 'the replica\'s error, not one of the proxy\'s own');
    } finally {
        await up.close();
    }
});

h.test('a request a replica read before it died is not sent to another replica (was: billed twice)', async () => {
    /* libcurl resends a request whose reused connection died before any answer on a new
       connection; when that one is refused, the call looked refused, as if the replica had
       never seen it, and went to the next replica. */
    let die = null;
    const a = await rawUpstream((req) => (die !== null && req.body.includes(die) ? 'reset-and-die' : 'answer')).listen();
    const b = await rawUpstream(() => 'answer').listen();
    try {
        const proxy = await env.startProxy({upstream: [a.url, b.url], workers: 1,
            args: ['--routing', 'round-robin', '--upstream-timeout', '10']});
        /* In turn: a (its connection stays in the pool), b, then a again on that connection. */
        for (const marker of [h.uniq('warm a'), h.uniq('warm b')]) {
            const r = await post(proxy, marker);
            assert.equal(r.status, 200, r.text);
        }
        assert.equal(a.requests.length, 1);
        assert.equal(b.requests.length, 1);
        die = h.uniq('bill me once');
        const r = await post(proxy, die);
        assert.equal(a.count(die), 1, 'the first replica read the request');
        assert.equal(b.count(die), 0, 'the request was not sent to a second replica');
        h.assertOpenAIError(r, 502);
        assert.equal((await proxy.stats()).upstream_failovers, 0);
    } finally {
        await a.close().catch(() => {});
        await b.close();
    }
});
