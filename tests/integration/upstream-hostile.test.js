'use strict';
/*
 * An upstream that misbehaves on purpose, or is broken in ways node's http
 * module would never be: a raw TCP upstream writes exactly the bytes each
 * test scripts. What the proxy promises whatever the upstream sends:
 *   - framing it cannot trust (Content-Length that is no number, negative,
 *     too large or given twice with two values; a Transfer-Encoding other
 *     than plain "chunked") is a 502 in the client's API format, never
 *     stored, never a hang;
 *   - 202 and 206 answers are relayed, never stored;
 *   - a JSON answer over cache-max-entry-size is relayed as it arrives;
 *   - an event stream with one endless event still flows to the client (the
 *     usage filter holds at most 1 MiB of an unfinished event);
 *   - bytes an upstream sends unasked on an idle keep-alive connection never
 *     become the next request's answer (another tenant's, maybe).
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

/*
 * The raw upstream: reads each request (head, then Content-Length bytes) and
 * answers with script[x-raw](seq, request, sock) = {bytes: [Buffer|string],
 * end: 'close' (FIN after the bytes) | 'keep' (the connection stays open) |
 * 'hold' (open, the test writes the rest: up.held)}. seq counts every
 * request, so each answer can carry a distinct text. up.last is the socket
 * of the last request.
 */
function rawUpstream(script) {
    const up = {seq: 0, calls: {}, sockets: new Set(), held: [], last: null};
    const server = net.createServer((sock) => {
        up.sockets.add(sock);
        sock.gone = new Promise((resolve) => sock.on('close', resolve));
        sock.on('close', () => up.sockets.delete(sock));
        sock.on('error', () => {});
        let buf = Buffer.alloc(0);
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            for (;;) {
                const end = buf.indexOf('\r\n\r\n');
                if (end < 0)
                    return;
                const head = buf.subarray(0, end).toString('latin1');
                const len = Number((/\r\ncontent-length:\s*(\d+)/i.exec(head) || [0, 0])[1]);
                if (buf.length < end + 4 + len)
                    return;
                const body = buf.subarray(end + 4, end + 4 + len).toString('utf8');
                buf = buf.subarray(end + 4 + len);
                const name = (/\r\nx-raw:\s*([^\r]*)/i.exec(head) || [0, ''])[1];
                up.calls[name] = (up.calls[name] || 0) + 1;
                up.last = sock;
                const fn = script[name];
                if (fn === undefined) {
                    sock.end('HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n');
                    return;
                }
                const answer = fn(++up.seq, {head, body}, sock);
                for (const b of answer.bytes)
                    sock.write(b);
                if (answer.end === 'hold')
                    up.held.push(sock);
                else if (answer.end !== 'keep')
                    sock.end();
            }
        });
    });
    up.listen = () => new Promise((resolve) => server.listen(0, '127.0.0.1', () => {
        up.port = server.address().port;
        up.url = `http://127.0.0.1:${up.port}`;
        resolve(up);
    }));
    up.close = () => {
        up.sockets.forEach((s) => s.destroy());
        return new Promise((resolve) => server.close(resolve));
    };
    up.count = (name) => up.calls[name] || 0;
    /* Write on sock; resolves once the bytes are handed to the kernel (on loopback: delivered). */
    up.write = (sock, bytes) => new Promise((resolve, reject) =>
        sock.write(bytes, (e) => (e ? reject(e) : resolve())));
    return up;
}

function chatJson(seq, text = `raw answer #${seq}`) {
    return JSON.stringify({
        id: `chatcmpl-raw${seq}`, object: 'chat.completion', created: 1700000000, model: h.CHAT_MODEL,
        choices: [{index: 0, message: {role: 'assistant', content: text}, finish_reason: 'stop'}],
        usage: {prompt_tokens: 7, completion_tokens: 5, total_tokens: 12},
    });
}

function messageJson(seq) {
    return JSON.stringify({
        id: `msg_raw${seq}`, type: 'message', role: 'assistant', model: h.CLAUDE_MODEL,
        content: [{type: 'text', text: `raw answer #${seq}`}], stop_reason: 'end_turn',
        stop_sequence: null, usage: {input_tokens: 7, output_tokens: 5},
    });
}

/* The body for the request's API: a chat completion or an Anthropic message. */
const answerFor = (seq, req) => (/^POST \/v1\/messages/.test(req.head) ? messageJson(seq) : chatJson(seq));
const chunked = (b) => `${Buffer.byteLength(b).toString(16)}\r\n${b}\r\n0\r\n\r\n`;
const HEAD = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n';
const withLength = (body, status = '200 OK') =>
    `HTTP/1.1 ${status}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

/* Framing the proxy cannot trust; each answer is otherwise a whole, valid one. */
const badFraming = {
    'cl-alpha': (seq, req) => {
        const b = answerFor(seq, req);
        return {bytes: [`${HEAD}Content-Length: ${Buffer.byteLength(b)}x\r\n\r\n${b}`], end: 'keep'};
    },
    'cl-negative': (seq, req) => ({bytes: [`${HEAD}Content-Length: -1\r\n\r\n${answerFor(seq, req)}`]}),
    'cl-overflow': (seq, req) => ({bytes: [`${HEAD}Content-Length: 99999999999999999999999\r\n\r\n${answerFor(seq, req)}`]}),
    'cl-two-values': (seq, req) => {
        const b = answerFor(seq, req);
        const n = Buffer.byteLength(b);
        return {bytes: [`${HEAD}Content-Length: ${n + 3}\r\nContent-Length: ${n}\r\n\r\n${b}`], end: 'keep'};
    },
    'cl-list': (seq, req) => {
        const b = answerFor(seq, req);
        const n = Buffer.byteLength(b);
        return {bytes: [`${HEAD}Content-Length: ${n}, ${n + 3}\r\n\r\n${b}`], end: 'keep'};
    },
    'te-gzip-chunked': (seq, req) => ({bytes: [`${HEAD}Transfer-Encoding: gzip, chunked\r\n\r\n${chunked(answerFor(seq, req))}`],
        end: 'keep'}),
    'te-chunked-gzip': (seq, req) => ({bytes: [`${HEAD}Transfer-Encoding: chunked, gzip\r\n\r\n${chunked(answerFor(seq, req))}`]}),
    'te-unknown': (seq, req) => ({bytes: [`${HEAD}Transfer-Encoding: frobnicate\r\n\r\n${answerFor(seq, req)}`]}),
    'te-and-cl': (seq, req) => {
        const b = chunked(answerFor(seq, req));
        return {bytes: [`${HEAD}Transfer-Encoding: chunked\r\nContent-Length: ${b.length}\r\n\r\n${b}`], end: 'keep'};
    },
};

/* One long text so the answer passes cache-max-entry-size (64k below). */
const BIG_TEXT = 'lorem ipsum dolor sit amet '.repeat(6000);

const script = {
    ...badFraming,
    'ok': (seq, req) => ({bytes: [withLength(answerFor(seq, req))], end: 'keep'}),
    'accepted': (seq) => ({bytes: [withLength(chatJson(seq), '202 Accepted')], end: 'keep'}),
    'partial': (seq) => {
        const b = chatJson(seq);
        return {bytes: [`HTTP/1.1 206 Partial Content\r\nContent-Type: application/json\r\n` +
            `Content-Range: bytes 0-${Buffer.byteLength(b) - 1}/${Buffer.byteLength(b)}\r\n` +
            `Content-Length: ${Buffer.byteLength(b)}\r\n\r\n${b}`], end: 'keep'};
    },
    /* the first half of a large answer; the test writes the rest */
    'big-held': (seq, req, sock) => {
        const b = Buffer.from(chatJson(seq, BIG_TEXT));
        const half = Math.floor(b.length / 2);
        sock.rest = b.subarray(half);
        return {bytes: [`${HEAD}Content-Length: ${b.length}\r\n\r\n`, b.subarray(0, half)], end: 'hold'};
    },
    /* a stream whose third event is one line that does not end (the test ends it) */
    'sse-endless': (seq, req, sock) => {
        const base = {id: `chatcmpl-raw${seq}`, object: 'chat.completion.chunk', created: 1700000000,
            model: h.CHAT_MODEL};
        const chunk = (delta, finish) => `data: ${JSON.stringify({...base,
            choices: [{index: 0, delta, finish_reason: finish}]})}\n\n`;
        sock.rest = [chunk({}, 'stop'), `data: ${JSON.stringify({...base, choices: [],
            usage: {prompt_tokens: 7, completion_tokens: 5, total_tokens: 12}})}\n\n`, 'data: [DONE]\n\n'];
        return {bytes: ['HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n',
            chunk({role: 'assistant', content: ''}, null), chunk({content: `raw answer #${seq}`}, null),
            'data: {"x": "'], end: 'hold'};
    },
};

const env = h.environment({proxy: false});
let up;
let proxy;

h.test('set up: a raw upstream and a proxy in front of it', async () => {
    up = await rawUpstream(script).listen();
    proxy = await env.startProxy({upstream: up.url,
        args: ['--upstream-timeout', '5', '--cache-max-entry-size', '64k']});
});

const post = (path, body, name, headers = {}) =>
    proxy.post(path, body, {'x-raw': name, ...headers}).catch((e) => e);

for (const name of Object.keys(badFraming)) {
    h.test(`an answer with bad framing (${name}) is a 502 in the client's format, never stored`, async () => {
        for (const [path, makeBody] of [[CHAT, h.chatBody], [MESSAGES, h.messagesBody]]) {
            const body = makeBody(h.uniq(name));
            for (let i = 1; i <= 2; i++) {
                const calls = up.count(name);
                const r = await post(path, body, name);
                assert.ok(!(r instanceof Error), `a whole reply: ${r}`);
                h.assertApiError(r, path, 502);
                assert.equal(up.count(name), calls + 1, 'each attempt reaches the upstream');
            }
        }
        /* The proxy still answers from this upstream afterwards. */
        const ok = await post(CHAT, h.chatBody(h.uniq('after ' + name)), 'ok');
        assert.equal(ok.status, 200, ok.text);
    });
}

for (const [name, status] of [['accepted', 202], ['partial', 206]]) {
    h.test(`a ${status} answer is relayed but never stored`, async () => {
        const body = h.chatBody(h.uniq(name));
        for (let i = 1; i <= 2; i++) {
            const r = await post(CHAT, body, name);
            assert.equal(r.status, status, r.text);
            assert.notEqual(r.headers['x-cache-status'], 'HIT');
            assert.match(r.json.choices[0].message.content, /^raw answer #\d+$/);
            assert.equal(up.count(name), i, 'a later identical request goes upstream again');
        }
    });
}

h.test('a JSON answer over cache-max-entry-size is relayed as it arrives, whole, and not stored', async () => {
    const body = h.chatBody(h.uniq('big json'));
    for (let i = 1; i <= 2; i++) {
        const s = await h.withDeadline(proxy.openStream(CHAT, body, {'x-raw': 'big-held'}), 10000,
            'the head of a large answer whose second half is held back');
        assert.equal(s.status, 200);
        assert.notEqual(s.cache, 'HIT');
        await h.waitFor(() => s.bytes >= 64 * 1024,
            {what: 'the first half reaches the client before the upstream sends the rest'});
        const sock = up.held.shift();
        await up.write(sock, sock.rest);
        const end = await s.rest(10000);
        assert.ok(end.complete, 'the answer ends normally');
        const json = JSON.parse(end.text);
        assert.equal(json.choices[0].message.content, BIG_TEXT, 'the whole text, byte for byte');
        assert.equal(up.count('big-held'), i, 'not stored: every request goes upstream');
    }
});

h.test('a stream with one endless event keeps flowing to the client and is not stored', async () => {
    /* No include_usage: the proxy asks for usage and filters it out for this client. */
    const body = h.chatBody(h.uniq('endless'), {stream: true});
    const MB = 1024 * 1024;
    const piece = 'x'.repeat(64 * 1024);
    for (let i = 1; i <= 2; i++) {
        const s = await proxy.openStream(CHAT, body, {'x-raw': 'sse-endless'});
        assert.equal(s.status, 200);
        const sock = up.held.shift();
        /* 3 MiB of one line: the client must see more than 2 MiB of it before it ends. */
        for (let sent = 0; sent < 3 * MB; sent += piece.length)
            await up.write(sock, piece);
        await h.waitFor(() => s.bytes > 2 * MB,
            {what: 'the unfinished event to pass through the usage filter'});
        await up.write(sock, `"}\n\n${sock.rest.join('')}`);
        sock.end();
        const end = await s.rest(20000);
        assert.ok(end.complete, 'the stream ends as the upstream ended it');
        assert.ok(end.text.includes('data: [DONE]'));
        assert.ok(!end.text.includes('"usage"'), 'the usage the client did not ask for is still taken out');
        assert.equal(up.count('sse-endless'), i, 'not stored: every request goes upstream');
    }
});

/*
 * The proxy closes the idle connection once the unasked bytes reach it (they
 * may still be in the kernel's hands when the upstream's write returns, so
 * the close is what the test waits for); the next request, from another
 * tenant, is then answered by its own call. A request that reuses the
 * connection before the close is checked right before its bytes are written
 * (idle_check_reuse in src/upstream.c): what waits there makes it resend.
 */
h.test('bytes an upstream sends unasked on an idle connection never answer the next request', async () => {
    for (const [path, makeBody] of [[CHAT, h.chatBody], [MESSAGES, h.messagesBody]]) {
        const first = await post(path, makeBody(h.uniq('tenant a')), 'ok',
            {authorization: 'Bearer sk-tenant-a', 'x-api-key': 'sk-tenant-a'});
        assert.equal(first.status, 200, first.text);
        const sock = up.last;
        /* A second, unasked answer on the now idle keep-alive connection. */
        await up.write(sock, withLength(chatJson(0, 'STRAY answer nobody asked for')));
        await h.withDeadline(sock.gone, 10000, 'the proxy to close the connection the bytes came on');
        const second = await post(path, makeBody(h.uniq('tenant b')), 'ok',
            {authorization: 'Bearer sk-tenant-b', 'x-api-key': 'sk-tenant-b'});
        assert.equal(second.status, 200, second.text);
        assert.doesNotMatch(second.text, /STRAY/, 'not the bytes sent unasked');
        const text = path === CHAT ? second.json.choices[0].message.content : second.json.content[0].text;
        assert.match(text, /^raw answer #\d+$/);
    }
});

h.test('tear down', async () => {
    await up.close();
});
