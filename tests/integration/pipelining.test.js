'use strict';
/*
 * Pipelined requests on one keep-alive connection: every answer comes back
 * in the order of the requests and to its own request, whether it is a hit
 * served at once, a miss that waits on the upstream, a stream, a
 * pass-through, the proxy's own endpoint or error, however the bytes are
 * cut; a client that hangs up mid-pipeline costs nobody else anything.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const AUTH = 'Authorization: Bearer sk-pipelining\r\n';

/* The answers in buf, in order: [{status, head, body}], framed as each says; interim 100s left out. */
function parseAnswers(buf) {
    const out = [];
    let off = 0;
    for (;;) {
        const end = buf.indexOf('\r\n\r\n', off);
        if (end < 0)
            return out;
        const head = buf.subarray(off, end).toString('latin1');
        const status = Number(head.split(' ')[1]);
        let p = end + 4;
        if (status === 100) {
            off = p;
            continue;
        }
        const cl = /\r\ncontent-length: *(\d+)/i.exec(head);
        let body;
        if (cl) {
            if (buf.length < p + Number(cl[1]))
                return out;
            body = buf.subarray(p, p + Number(cl[1]));
            p += Number(cl[1]);
        } else {
            assert.match(head, /\r\ntransfer-encoding: chunked/i);
            const parts = [];
            for (;;) {
                const le = buf.indexOf('\r\n', p);
                if (le < 0)
                    return out;
                const size = parseInt(buf.subarray(p, le).toString('latin1'), 16);
                if (buf.length < le + 2 + size + 2)
                    return out;
                parts.push(buf.subarray(le + 2, le + 2 + size));
                p = le + 4 + size;
                if (size === 0)
                    break;
            }
            body = Buffer.concat(parts);
        }
        out.push({status, head, body: body.toString('utf8')});
        off = p;
    }
}

/* The text of an SSE chat stream's deltas. */
function streamText(body) {
    let text = '';
    for (const line of body.split('\n')) {
        if (!line.startsWith('data: {'))
            continue;
        for (const c of JSON.parse(line.slice(6)).choices || [])
            text += (c.delta && c.delta.content) || '';
    }
    return text;
}

function post(body, extra = '') {
    const json = JSON.stringify(body);
    return `POST ${CHAT} HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\n${extra}` +
        `Content-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;
}

function postChunked(body) {
    const json = Buffer.from(JSON.stringify(body));
    const cut = Math.floor(json.length / 3);
    return `POST ${CHAT} HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\n` +
        `Transfer-Encoding: chunked\r\n\r\n${cut.toString(16)};piece=1\r\n${json.subarray(0, cut)}\r\n` +
        `${(json.length - cut).toString(16)}\r\n${json.subarray(cut)}\r\n0\r\nX-Trailer: t\r\n\r\n`;
}

/*
 * Requests of each kind, with what their answer must be. The miss comes first and its
 * upstream is slow: an answer served as soon as it is ready would overtake it.
 */
function pipeline(hitPrompt) {
    const slow = h.uniq('slow miss');
    const miss = h.uniq('miss');
    const stream = h.uniq('stream');
    const chunked = h.uniq('chunked');
    const expect = h.uniq('expect');
    const says = (prompt) => (a) => a.status === 200 && JSON.parse(a.body).choices[0].message.content.includes(prompt);
    return [
        {text: post(h.chatBody(slow), 'x-mock-delay-ms: 300\r\n'), ok: says(slow)},
        {text: post(h.chatBody(hitPrompt)), ok: (a) => says(hitPrompt)(a) && /x-cache-status: HIT/i.test(a.head)},
        {text: 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n', ok: (a) => a.status === 200 && /"ok"/.test(a.body)},
        {text: post({...h.chatBody(stream), stream: true}), ok: (a) => a.status === 200 && streamText(a.body).includes(stream)},
        {text: `POST ${CHAT} HTTP/1.1\r\nHost: x\r\n${AUTH}Content-Type: application/json\r\nContent-Length: 6\r\n\r\n{bad}}`,
            ok: (a) => a.status === 400},
        {text: `GET /v1/models HTTP/1.1\r\nHost: x\r\n${AUTH}\r\n`, ok: (a) => a.status === 200 && JSON.parse(a.body).object === 'list'},
        {text: postChunked(h.chatBody(chunked)), ok: says(chunked)},
        {text: post(h.chatBody(expect), 'Expect: 100-continue\r\n'), ok: says(expect)},
        {text: post(h.chatBody(miss)), ok: says(miss)},
        {text: 'HEAD /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', ok: (a) => a.status === 200, head: true},
    ];
}

/* Send the requests' bytes in pieces of `piece` bytes; resolves to the answers once the proxy closed. */
function exchange(reqs, piece) {
    const bytes = Buffer.from(reqs.map((r) => r.text).join(''));
    return h.withDeadline(new Promise((resolve) => {
        const sock = net.connect({port: env.proxy.port, host: '127.0.0.1'}, () => {
            for (let p = 0; p < bytes.length; p += piece)
                sock.write(bytes.subarray(p, p + piece));
        });
        let buf = Buffer.alloc(0);
        sock.on('data', (d) => { buf = Buffer.concat([buf, d]); });
        sock.on('close', () => resolve(buf));
        sock.on('error', () => {});
    }), 20000, 'the answers to a pipeline');
}

h.test('pipelined hits, misses, streams and errors are answered in order, each to its own request', async () => {
    const hitPrompt = h.uniq('pipelined hit');
    assert.equal((await env.proxy.post(CHAT, h.chatBody(hitPrompt), h.bearer('sk-pipelining'))).status, 200);
    for (const piece of [1 << 20, 7, 1]) {
        const reqs = pipeline(hitPrompt);
        const buf = await exchange(reqs, piece);
        /* HEAD's answer has a Content-Length and no body: it is the last, after Connection: close. */
        const answers = parseAnswers(buf.subarray(0, buf.lastIndexOf('HTTP/1.1 ')));
        assert.equal(answers.length, reqs.length - 1, `pieces of ${piece}: ${buf.toString('latin1').slice(0, 2000)}`);
        answers.forEach((a, i) => assert.ok(reqs[i].ok(a), `pieces of ${piece}: answer ${i}: ${a.status} ${a.body.slice(0, 300)}`));
        assert.match(buf.subarray(buf.lastIndexOf('HTTP/1.1 ')).toString('latin1'), /^HTTP\/1\.1 200 [^]*connection: close\r\n[^]*\r\n\r\n$/i);
    }
});

h.test('a client that hangs up mid-pipeline: its upstream call ends, the others are served', async () => {
    const before = await env.proxy.stats();
    const aborted = env.mock.aborted;
    const slow = h.uniq('abandoned');
    const sock = net.connect({port: env.proxy.port, host: '127.0.0.1'});
    await new Promise((resolve) => sock.on('connect', resolve));
    sock.on('error', () => {});
    /* The first is held at the mock; two more wait behind it, the last one cut short. */
    const hold = h.uniq('hold').replace(' ', '-');
    sock.write(post(h.chatBody(slow), `x-mock-hold: ${hold}\r\n`) + post(h.chatBody(h.uniq('behind'))) +
        post(h.chatBody(h.uniq('cut'))).slice(0, 60));
    await env.mock.waitForHold(hold);
    sock.destroy();
    try {
        await env.mock.waitForAborted(aborted + 1, 10000);
    } finally {
        env.mock.release(hold);
    }
    const hitPrompt = h.uniq('after the hang-up');
    assert.equal((await env.proxy.post(CHAT, h.chatBody(hitPrompt), h.bearer('sk-pipelining'))).status, 200);
    const reqs = pipeline(hitPrompt);
    const buf = await exchange(reqs, 1 << 20);
    const answers = parseAnswers(buf.subarray(0, buf.lastIndexOf('HTTP/1.1 ')));
    answers.forEach((a, i) => assert.ok(reqs[i].ok(a), `answer ${i}: ${a.status} ${a.body.slice(0, 300)}`));
    assert.equal(answers.length, reqs.length - 1);
    await h.eventually(async () => {
        const after = await env.proxy.stats();
        assert.equal(after.client_aborts, before.client_aborts + 1, 'one client abort');
        assert.equal(after.requests_active, 0, 'no request left behind');
        assert.equal(after.request_memory_bytes, 0, 'no request memory left charged');
    });
});
