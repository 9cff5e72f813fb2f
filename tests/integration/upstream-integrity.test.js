'use strict';
/*
 * What an upstream's answer must be before the proxy relays it as whole and
 * stores it: a raw TCP upstream writes exactly the bytes each test scripts
 * (HTTP/1.0 answers delimited by the connection's close, wrong
 * Content-Length, chunks cut mid-way, interim 1xx heads, redirects, encoded
 * bodies, error events in a 200 stream), which node's http module would not
 * send. An answer that did not complete is never stored, and the client can
 * tell it did not complete: a JSON client gets a 502, a stream client a
 * connection closed without the stream's final chunk.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const zlib = require('node:zlib');
const h = require('./lib');

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

/*
 * The raw upstream: reads one request (head, then Content-Length bytes),
 * then answers with script[x-raw](seq, request) = {bytes: [Buffer|string],
 * end: 'close' (FIN after the bytes) | 'keep' (the connection stays open) |
 * 'hold' (open until up.release() closes it with a FIN)}.
 * seq counts every request, so each answer can carry a distinct text.
 */
function rawUpstream(script) {
    const up = {seq: 0, calls: {}, sockets: new Set(), held: []};
    const server = net.createServer((sock) => {
        up.sockets.add(sock);
        sock.on('close', () => up.sockets.delete(sock));
        sock.on('error', () => {});
        let buf = Buffer.alloc(0);
        const onData = (d) => {
            buf = Buffer.concat([buf, d]);
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
            const seq = ++up.seq;
            const fn = script[name];
            if (fn === undefined) {
                sock.end('HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n');
                return;
            }
            const answer = fn(seq, {head, body});
            for (const b of answer.bytes)
                sock.write(b);
            if (answer.end === 'hold')
                up.held.push(sock);
            else if (answer.end !== 'keep')
                sock.end();
        };
        sock.on('data', onData);
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
    up.release = () => up.held.splice(0).forEach((sock) => sock.end());
    return up;
}

/* A whole chat completion whose text names the call. */
function chatJson(seq, usage = {prompt_tokens: 7, completion_tokens: 5, total_tokens: 12}) {
    return JSON.stringify({
        id: `chatcmpl-raw${seq}`, object: 'chat.completion', created: 1700000000, model: h.CHAT_MODEL,
        choices: [{index: 0, message: {role: 'assistant', content: `raw answer #${seq}`},
            finish_reason: 'stop'}],
        usage,
    });
}

/* The events of a chat stream whose text names the call, [DONE] last. */
function chatEvents(seq) {
    const base = {id: `chatcmpl-raw${seq}`, object: 'chat.completion.chunk', created: 1700000000,
        model: h.CHAT_MODEL};
    const chunk = (delta, finish) => `data: ${JSON.stringify({...base,
        choices: [{index: 0, delta, finish_reason: finish}]})}\n\n`;
    return [
        chunk({role: 'assistant', content: ''}, null),
        chunk({content: `raw answer #${seq}`}, null),
        chunk({}, 'stop'),
        `data: ${JSON.stringify({...base, choices: [],
            usage: {prompt_tokens: 7, completion_tokens: 5, total_tokens: 12}})}\n\n`,
        'data: [DONE]\n\n',
    ];
}

/* The events of an Anthropic stream, message_stop last. */
function messageEvents(seq) {
    const ev = (type, data) => `event: ${type}\ndata: ${JSON.stringify({type, ...data})}\n\n`;
    return [
        ev('message_start', {message: {id: `msg_raw${seq}`, type: 'message', role: 'assistant',
            model: h.CLAUDE_MODEL, content: [], stop_reason: null, stop_sequence: null,
            usage: {input_tokens: 7, output_tokens: 1}}}),
        ev('content_block_start', {index: 0, content_block: {type: 'text', text: ''}}),
        ev('content_block_delta', {index: 0, delta: {type: 'text_delta', text: `raw answer #${seq}`}}),
        ev('content_block_stop', {index: 0}),
        ev('message_delta', {delta: {stop_reason: 'end_turn', stop_sequence: null},
            usage: {output_tokens: 5}}),
        ev('message_stop', {}),
    ];
}

const JSON_HEAD10 = 'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n';
const SSE_HEAD10 = 'HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n';
const withLength = (body, ctype = 'application/json', extra = '') =>
    `HTTP/1.1 200 OK\r\nContent-Type: ${ctype}\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;

const script = {
    /* HTTP/1.0, no Content-Length: the close ends the body */
    'json-close-whole': (seq) => ({bytes: [JSON_HEAD10, chatJson(seq)]}),
    'json-close-cut': (seq) => ({bytes: [JSON_HEAD10, chatJson(seq).slice(0, 90)]}),
    'sse-close-whole': (seq) => ({bytes: [SSE_HEAD10, ...chatEvents(seq)]}),
    'sse-close-cut': (seq) => ({bytes: [SSE_HEAD10, ...chatEvents(seq).slice(0, 3)]}),
    'sse-close-cut-usage': (seq) => ({bytes: [SSE_HEAD10, ...chatEvents(seq).slice(0, 4)]}),
    'msg-close-whole': (seq) => ({bytes: [SSE_HEAD10, ...messageEvents(seq)]}),
    'msg-close-cut': (seq) => ({bytes: [SSE_HEAD10, ...messageEvents(seq).slice(0, 5)]}),
    'sse-close-held': (seq) => ({bytes: [SSE_HEAD10, ...chatEvents(seq).slice(0, 2)], end: 'hold'}),
    /* framing the body does not keep */
    'cl-long': (seq) => {
        const b = chatJson(seq);
        return {bytes: [`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${b.length + 40}\r\n\r\n${b}`]};
    },
    'cl-short': (seq) => {
        const b = chatJson(seq);
        return {bytes: [`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: ${b.length - 12}\r\n\r\n${b}`],
            end: 'keep'};
    },
    'chunk-cut': (seq) => {
        const b = chatJson(seq);
        return {bytes: ['HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
            `${b.length.toString(16)}\r\n${b.slice(0, 50)}`]};
    },
    'chunk-no-last': (seq) => {
        const b = chatJson(seq);
        return {bytes: ['HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n',
            `${b.length.toString(16)}\r\n${b}\r\n`]};
    },
    /* interim heads before the answer; a redirect; bodies that are no answer */
    'interim': (seq) => ({bytes: ['HTTP/1.1 100 Continue\r\n\r\n',
        'HTTP/1.1 103 Early Hints\r\nLink: </hint>; rel=preload\r\nX-Interim: 1\r\n\r\n',
        withLength(chatJson(seq))], end: 'keep'}),
    'redirect': () => ({bytes: ['HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere\r\n' +
        'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'], end: 'keep'}),
    'redirect-308': () => ({bytes: ['HTTP/1.1 308 Permanent Redirect\r\nLocation: /v2/chat\r\n' +
        'Content-Length: 0\r\n\r\n'], end: 'keep'}),
    'html-200': () => ({bytes: [withLength('<html><body>gateway says hi</body></html>', 'text/html')],
        end: 'keep'}),
    'json-as-text': (seq) => ({bytes: [withLength(chatJson(seq), 'text/plain')], end: 'keep'}),
    'gzip': (seq) => {
        const z = zlib.gzipSync(chatJson(seq));
        return {bytes: [`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: ${z.length}\r\n\r\n`, z],
            end: 'keep'};
    },
    'gzip-close': (seq) => ({bytes: ['HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n\r\n',
        zlib.gzipSync(chatJson(seq))]}),
    'status-999': () => ({bytes: ['HTTP/1.1 999 Weird\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}'],
        end: 'keep'}),
    'status-600': () => ({bytes: ['HTTP/1.1 600 Beyond\r\nContent-Length: 0\r\n\r\n'], end: 'keep'}),
    'ok': (seq) => ({bytes: [withLength(chatJson(seq))], end: 'keep'}),
    /* framed 200 streams that carry an error event */
    'sse-error-event': (seq) => ({bytes: [withLength([...chatEvents(seq).slice(0, 2),
        `data: ${JSON.stringify({error: {message: 'overloaded', type: 'server_error'}})}\n\n`].join(''),
    'text/event-stream')]}),
    'sse-usage-then-error': (seq) => ({bytes: [withLength([...chatEvents(seq).slice(0, 4),
        `data: ${JSON.stringify({error: {message: 'overloaded', type: 'server_error'}})}\n\n`].join(''),
    'text/event-stream')]}),
    'msg-error-event': (seq) => ({bytes: [withLength([...messageEvents(seq).slice(0, 3),
        `event: error\ndata: ${JSON.stringify({type: 'error',
            error: {type: 'overloaded_error', message: 'Overloaded'}})}\n\n`].join(''),
    'text/event-stream')]}),
};

const env = h.environment({proxy: false});
let up;
let proxy;

h.test('set up: a raw upstream and a proxy in front of it', async () => {
    up = await rawUpstream(script).listen();
    proxy = await env.startProxy({upstream: up.url, args: ['--upstream-timeout', '5']});
});

/* Send body with x-raw: name; returns the response (or the Error of a cut-off one). */
const post = (path, body, name, headers = {}) =>
    proxy.post(path, body, {'x-raw': name, ...headers}).catch((e) => e);

/*
 * A stream the upstream did not finish: a 502 when the proxy learnt of the
 * cut before it relayed the head (all bytes and the close in one read), else
 * a connection closed without the final chunk.
 */
async function assertCut(path, body, name) {
    const s = await proxy.openStream(path, body, {'x-raw': name});
    if (s.status !== 200) {
        const end = await s.rest(10000);
        assert.equal(s.status, 502, end.text);
        assert.match(end.text, /before its answer was complete/);
        return;
    }
    const end = await s.rest(10000);
    assert.ok(!end.complete && end.error, 'the client sees a broken stream, not a finished one');
}

h.test('an HTTP/1.0 JSON answer ended by the close is relayed and stored when whole', async () => {
    const body = h.chatBody(h.uniq('close whole'));
    const r = await post(CHAT, body, 'json-close-whole');
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].message.content, /^raw answer #\d+$/);
    const again = await post(CHAT, body, 'json-close-whole');
    h.assertHit(again);
    assert.equal(again.json.choices[0].message.content, r.json.choices[0].message.content);
});

h.test('an HTTP/1.0 JSON answer cut off by the close is a 502, never stored', async () => {
    const body = h.chatBody(h.uniq('close cut'));
    const calls = up.count('json-close-cut');
    for (let i = 1; i <= 2; i++) {
        const r = await post(CHAT, body, 'json-close-cut');
        assert.ok(!(r instanceof Error), `a whole reply: ${r}`);
        h.assertOpenAIError(r, 502);
        assert.match(r.json.error.message, /before its answer was complete/);
        assert.equal(up.count('json-close-cut'), calls + i, 'every attempt reaches the upstream');
    }
});

h.test('an HTTP/1.0 stream ended by the close is relayed whole and stored when complete', async () => {
    const body = h.chatBody(h.uniq('sse close whole'), h.STREAM_WITH_USAGE);
    const s = await proxy.openStream(CHAT, body, {'x-raw': 'sse-close-whole'});
    const end = await s.rest(10000);
    assert.ok(end.complete, 'the stream ends normally');
    assert.ok(h.assembleChat(end.events).done);
    const again = await post(CHAT, body, 'sse-close-whole');
    assert.equal(again.headers['x-cache-status'], 'HIT');
});

for (const [what, path, makeBody, name] of [
    ['an OpenAI stream without [DONE]', CHAT, h.chatBody, 'sse-close-cut'],
    ['an OpenAI stream cut after its usage chunk', CHAT, h.chatBody, 'sse-close-cut-usage'],
    ['an Anthropic stream without message_stop', MESSAGES, h.messagesBody, 'msg-close-cut'],
]) {
    h.test(`${what}, ended by an HTTP/1.0 close, is cut off towards the client and never stored`, async () => {
        const body = makeBody(h.uniq(name), {stream: true, ...(path === CHAT ? {stream_options: {include_usage: true}} : {})});
        const calls = up.count(name);
        for (let i = 1; i <= 2; i++) {
            await assertCut(path, body, name);
            assert.equal(up.count(name), calls + i, 'every attempt reaches the upstream');
        }
    });
}

h.test('an HTTP/1.0 stream closed after its first events breaks the client\'s stream', async () => {
    const body = h.chatBody(h.uniq('held close'), h.STREAM_WITH_USAGE);
    for (let i = 0; i < 2; i++) {
        const s = await proxy.openStream(CHAT, body, {'x-raw': 'sse-close-held'});
        assert.equal(s.status, 200);
        assert.match(JSON.stringify(await s.nextEvent()), /chatcmpl-raw/, 'the first event is relayed');
        up.release();
        const end = await s.rest(10000);
        assert.ok(!end.complete && end.error, 'the client sees a broken stream, not a finished one');
        assert.ok(!h.assembleChat(end.events).done);
    }
    assert.equal(up.count('sse-close-held'), 2, 'not stored: both reached the upstream');
});

/* The upstream's own counts of what it billed, for the answers it reported usage in. */
const tokens = async () => {
    const st = await proxy.stats();
    return [st.tokens_upstream_prompt, st.tokens_upstream_completion];
};
const tokensGrow = async (before, by) => h.eventually(async () => {
    const now = await tokens();
    assert.deepEqual([now[0] - before[0], now[1] - before[1]], by);
});

h.test('a 200 stream with an error event is relayed, never stored, and counts the usage reported before it', async () => {
    for (const [path, makeBody, name, usage] of [
        [CHAT, h.chatBody, 'sse-error-event', [0, 0]],
        [CHAT, h.chatBody, 'sse-usage-then-error', [7, 5]],
        [MESSAGES, h.messagesBody, 'msg-error-event', [7, 1]],
    ]) {
        const body = makeBody(h.uniq(name), {stream: true, ...(path === CHAT ? {stream_options: {include_usage: true}} : {})});
        for (let i = 1; i <= 2; i++) {
            const before = await tokens();
            const s = await proxy.openStream(path, body, {'x-raw': name});
            assert.equal(s.status, 200);
            assert.notEqual(s.cache, 'HIT', name);
            const end = await s.rest(10000);
            assert.ok(end.complete, `${name}: relayed as the upstream ended it`);
            assert.match(end.text, /overloaded/i, name);
            assert.equal(up.count(name), i, `${name}: not stored, every attempt reaches the upstream`);
            await tokensGrow(before, usage);
        }
        const json = await post(path, makeBody(h.uniq(name)), name);
        assert.notEqual(json.headers['x-cache-status'], 'HIT');
    }
});

h.test('an HTTP/1.0 stream cut after its usage chunk counts that usage', async () => {
    const before = await tokens();
    await assertCut(CHAT, h.chatBody(h.uniq('usage cut'), h.STREAM_WITH_USAGE), 'sse-close-cut-usage');
    await tokensGrow(before, [7, 5]);
});

h.test('an HTTP/1.0 Anthropic stream with message_stop is stored', async () => {
    const body = h.messagesBody(h.uniq('msg close whole'), {stream: true});
    const s = await proxy.openStream(MESSAGES, body, {'x-raw': 'msg-close-whole'});
    const end = await s.rest(10000);
    assert.ok(end.complete);
    const again = await post(MESSAGES, body, 'msg-close-whole');
    assert.equal(again.headers['x-cache-status'], 'HIT');
});

/* Two identical calls: {first, second, calls} (a stored answer makes the second a HIT). */
async function twice(name) {
    const body = h.chatBody(h.uniq(name));
    const calls = up.count(name);
    const first = await post(CHAT, body, name);
    const second = await post(CHAT, body, name);
    return {first, second, calls: up.count(name) - calls};
}

h.test('a body shorter than its Content-Length or its chunks is a 502, never stored', async () => {
    for (const name of ['cl-long', 'chunk-cut', 'chunk-no-last']) {
        const {first, second, calls} = await twice(name);
        h.assertOpenAIError(first, 502);
        h.assertOpenAIError(second, 502);
        assert.equal(calls, 2, name);
    }
});

h.test('a body longer than its Content-Length is cut there and never stored; the next call is unharmed', async () => {
    const {first, second, calls} = await twice('cl-short');
    assert.equal(first.status, 200);
    assert.equal(first.json, null, 'the answer as framed: not whole JSON');
    assert.notEqual(second.headers['x-cache-status'], 'HIT');
    assert.equal(calls, 2);
    /* The extra bytes are not read as the next answer's start. */
    const ok = await twice('ok');
    assert.equal(ok.first.status, 200, ok.first.text);
    h.assertHit(ok.second);
});

h.test('a status outside 100 to 599 is a 502, not relayed', async () => {
    for (const name of ['status-999', 'status-600']) {
        const {first} = await twice(name);
        h.assertOpenAIError(first, 502);
        assert.match(first.json.error.message, /malformed status line/, name);
    }
});

h.test('interim 1xx heads are dropped with their fields; the answer after them is stored', async () => {
    const {first, second, calls} = await twice('interim');
    assert.equal(first.status, 200);
    assert.equal(first.headers.link, undefined);
    assert.equal(first.headers['x-interim'], undefined);
    h.assertHit(second);
    assert.equal(second.headers.link, undefined);
    assert.equal(calls, 1);
});

h.test('a redirect is relayed, never followed and never stored', async () => {
    for (const [name, status] of [['redirect', 302], ['redirect-308', 308]]) {
        const {first, second, calls} = await twice(name);
        assert.equal(first.status, status);
        assert.ok(first.headers.location, 'Location relayed');
        assert.equal(second.status, status);
        assert.notEqual(second.headers['x-cache-status'], 'HIT');
        assert.equal(calls, 2, `${name}: each call reaches the upstream (and only it)`);
    }
});

h.test('a 200 that is no JSON answer, or an encoded one, is relayed as it came and never stored', async () => {
    const html = await twice('html-200');
    assert.equal(html.first.status, 200);
    assert.match(html.first.headers['content-type'], /text\/html/);
    assert.equal(html.calls, 2);
    for (const name of ['gzip', 'gzip-close']) {
        const {first, second, calls} = await twice(name);
        assert.equal(first.status, 200, name);
        assert.equal(first.headers['content-encoding'], 'gzip', `${name}: relayed with its encoding`);
        assert.match(zlib.gunzipSync(first.body).toString(), /raw answer #\d+/, name);
        assert.notEqual(second.headers['x-cache-status'], 'HIT', name);
        assert.equal(calls, 2, name);
    }
});

h.test('tear down', async () => {
    await up.close();
});
