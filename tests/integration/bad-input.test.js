'use strict';
/*
 * Bad requests are rejected by the proxy itself with a 4xx in the shape of
 * the API that was called; nothing reaches the upstream, nothing is cached,
 * and the proxy keeps serving.
 */
const assert = require('node:assert/strict');
const zlib = require('node:zlib');
const h = require('./lib');

const MAX_BODY = 4096;
const env = h.environment({proxyArgs: ['--max-body-size', String(MAX_BODY)]});

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';

const gzipped = (body) => zlib.gzipSync(JSON.stringify(body));

/* Each case: what is wrong, the path, the body (object or raw text), headers, expected status. */
const CASES = [
    ['malformed JSON', CHAT, '{"model": "gpt-4o-mini", "messages": [', {}, 400],
    ['malformed JSON', MESSAGES, '{"model": "claude", max_tokens: 5}', {}, 400],
    ['a JSON array body', CHAT, '[1, 2, 3]', {}, 400],
    ['an empty body', CHAT, '', {}, 400],
    ['wrong content type', CHAT, JSON.stringify(h.chatBody('ct')), {'content-type': 'text/plain'}, 415],
    ['wrong content type', MESSAGES, JSON.stringify(h.messagesBody('ct')),
        {'content-type': 'application/x-www-form-urlencoded'}, 415],
    ['missing model', CHAT, {messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['missing model', MESSAGES, {max_tokens: 5, messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['an empty model', CHAT, {model: '', messages: [{role: 'user', content: 'hi'}]}, {}, 400],
    ['missing messages', CHAT, {model: 'gpt-4o-mini'}, {}, 400],
    ['missing messages', MESSAGES, {model: 'claude-sonnet-4-5', max_tokens: 5}, {}, 400],
    ['messages not an array', CHAT, {model: 'gpt-4o-mini', messages: 'hello'}, {}, 400],
    ['an empty messages array', MESSAGES, {model: 'claude-sonnet-4-5', max_tokens: 5, messages: []}, {}, 400],
    ['missing prompt', '/v1/completions', {model: 'gpt-3.5-turbo-instruct'}, {}, 400],
    ['missing input', '/v1/embeddings', {model: 'text-embedding-3-small'}, {}, 400],
    ['stream not a boolean', CHAT, {...h.chatBody('s'), stream: 'yes'}, {}, 400],
    ['a body over max-body-size', CHAT, h.chatBody('x'.repeat(MAX_BODY * 2)), {}, 413],
    ['a body over max-body-size', MESSAGES, h.messagesBody('x'.repeat(MAX_BODY * 2)), {}, 413],
    ['a gzip body', CHAT, gzipped(h.chatBody('gz')), {'content-encoding': 'gzip'}, 415],
    ['a deflate body', MESSAGES, zlib.deflateSync(JSON.stringify(h.messagesBody('df'))),
        {'content-encoding': 'deflate'}, 415],
    ['a br body', CHAT, zlib.brotliCompressSync(JSON.stringify(h.chatBody('br'))), {'content-encoding': 'br'}, 415],
    ['an unknown coding after identity', CHAT, JSON.stringify(h.chatBody('xz')),
        {'content-encoding': 'identity, x-unknown'}, 415],
];

for (const [what, path, body, headers, status] of CASES) {
    h.test(`${path}: ${what} -> ${status} in the API's shape, twice, upstream untouched`, async () => {
        const calls = env.mock.callCount();
        for (let i = 0; i < 2; i++) {
            const r = await env.proxy.post(path, body, headers);
            h.assertApiError(r, path, status);
        }
        assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    });
}

h.test('a chunked body over max-body-size is a 413 too', async () => {
    const http = require('node:http');
    const status = await new Promise((resolve, reject) => {
        const req = http.request(`${env.proxy.url}${CHAT}`, {
            method: 'POST', agent: false,
            headers: {'content-type': 'application/json', authorization: `Bearer ${h.DEFAULT_KEY}`},
        }, (res) => {
            res.resume();
            resolve(res.statusCode);
        });
        req.on('error', reject);
        /* No Content-Length: node sends it chunked, so the limit applies while reading. */
        for (let i = 0; i < 4; i++)
            req.write('{"pad":"' + 'y'.repeat(MAX_BODY) + '",');
        req.end('"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}');
    }).catch((e) => e);
    /* A proxy may also close the connection once the limit is hit; a 2xx never. */
    if (!(status instanceof Error))
        assert.equal(status, 413);
});

h.test('the proxy keeps serving and counts client errors', async () => {
    const stats = await env.proxy.stats();
    assert.ok(stats.client_errors >= CASES.length, `client_errors ${stats.client_errors}`);
    assert.equal(stats.cache_stores, 0, 'no bad request was stored');
    const body = h.chatBody(h.uniq('after bad input'));
    const ok = await env.proxy.post(CHAT, body);
    assert.equal(ok.status, 200);
    h.assertHit(await env.proxy.post(CHAT, body));
});

h.test('a compressed body is a 415 that names its Content-Encoding; identity is plain JSON', async () => {
    const calls = env.mock.callCount();
    const gz = await env.proxy.post(CHAT, gzipped(h.chatBody(h.uniq('gzip'))), {'content-encoding': 'GZip'});
    h.assertOpenAIError(gz, 415);
    assert.match(gz.json.error.message, /Content-Encoding GZip is not supported/);
    const br = await env.proxy.post(MESSAGES, zlib.brotliCompressSync(JSON.stringify(h.messagesBody('b'))),
        {'content-encoding': 'br'});
    h.assertAnthropicError(br, 415);
    assert.match(br.json.error.message, /Content-Encoding br is not supported/);
    assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    const plain = await env.proxy.post(CHAT, h.chatBody(h.uniq('identity')), {'content-encoding': 'identity'});
    assert.equal(plain.status, 200);
});

h.test('a method other than POST on an API path does not reach the cache', async () => {
    const r = await env.proxy.request({method: 'GET', path: CHAT});
    assert.notEqual(r.status, 200);
    assert.notEqual(r.headers['x-cache-status'], 'HIT');
});

/*
 * max-request-memory counts what a request holds while the proxy works on
 * it, not only its body: every body byte is charged 5 times (the body, its
 * parse tree and the copies made of it), and a body of many small values its
 * parse tree as estimated before parsing (issue 20 point 6: bursts of large
 * bodies took 3 times the budget). A request beyond it is a 503 with
 * Retry-After: 1 in the API's shape, counted; the others are answered.
 */
const MEMORY = 16 << 20;
const memoryArgs = ['--max-body-size', '1m', '--max-request-memory', String(MEMORY)];

/* A chat body with a "stop_values" array of n zeros: a parse tree far larger than the text. */
function valuesBody(question, n) {
    return `{"model":"gpt-4o-mini","messages":[{"role":"user","content":${JSON.stringify(question)}}],` +
        `"stop_values":[${'0,'.repeat(n - 1)}0]}`;
}

/* POST body held at the mock upstream (hold id); once it is: {pending} (the response, after release). */
async function heldPost(proxy, body, id) {
    const calls = env.mock.callCount(CHAT);
    const pending = proxy.post(CHAT, body, {'x-mock-hold': id});
    await env.mock.waitForCalls(calls + 1, CHAT);
    await env.mock.waitForHold(id);
    return {pending};
}

async function memoryIdle(proxy) {
    await h.waitFor(async () => (await proxy.stats()).request_memory_bytes === 0,
        {what: 'request_memory_bytes back to 0'});
}

h.test('/stats counts a request\'s parse tree and copies in request_memory_bytes', async () => {
    const proxy = await env.startProxy({args: memoryArgs});
    /* One long text: 5 bytes per body byte, and no more. */
    const text = JSON.stringify(h.chatBody(h.uniq('memory text') + 'x'.repeat(500000)));
    const id = h.uniq('mem-text').replace(' ', '-');
    const {pending} = await heldPost(proxy, text, id);
    const used = (await proxy.stats()).request_memory_bytes;
    assert.ok(used >= 5 * text.length && used < 6 * text.length,
        `request_memory_bytes ${used} for a body of ${text.length} bytes: 5 per byte`);
    env.mock.release(id);
    assert.equal((await pending).status, 200);
    await memoryIdle(proxy);

    /* Many small values: the parse tree's estimate (a cJSON node each) is charged too. */
    const values = valuesBody(h.uniq('memory values'), 50000);
    const vid = h.uniq('mem-values').replace(' ', '-');
    const {pending: vpending} = await heldPost(proxy, values, vid);
    const vused = (await proxy.stats()).request_memory_bytes;
    assert.ok(vused >= 30 * values.length,
        `request_memory_bytes ${vused} for ${values.length} bytes of 50000 values: the tree counts`);
    env.mock.release(vid);
    assert.equal((await vpending).status, 200);
    await memoryIdle(proxy);
});

h.test('a burst beyond max-request-memory: 503 with Retry-After for some, answers for the others', async () => {
    const proxy = await env.startProxy({args: memoryArgs});
    const before = await proxy.stats();
    const calls = env.mock.callCount(CHAT);
    const id = h.uniq('mem-burst').replace(' ', '-');
    const N = 8; /* of 900 KB, 4.5 MB each: at most 3 fit in 16 MiB */
    const refused = [];
    const pending = Array.from({length: N}, (_, i) => {
        const body = JSON.stringify(h.chatBody(h.uniq(`burst ${i}`) + 'y'.repeat(900000)));
        return proxy.post(CHAT, body, {'x-mock-hold': id}).then((r) => {
            if (r.status !== 200)
                refused.push(r);
            return r;
        });
    });
    /* Every request is either refused or held at the upstream. */
    await h.waitFor(() => refused.length + env.mock.callCount(CHAT) - calls === N,
        {what: () => `${N} requests refused or upstream (${refused.length} refused, ` +
            `${env.mock.callCount(CHAT) - calls} upstream)`});
    const admitted = env.mock.callCount(CHAT) - calls;
    env.mock.release(id);
    const all = await Promise.all(pending);
    assert.ok(admitted >= 1 && admitted <= 3, `${admitted} admitted`);
    assert.equal(refused.length, N - admitted);
    for (const r of refused) {
        h.assertOpenAIError(r, 503);
        assert.equal(r.headers['retry-after'], '1');
        assert.match(r.json.error.message, /server busy/);
    }
    for (const r of all.filter((x) => x.status === 200))
        assert.match(h.chatText(r.json), /^mock answer #\d+ to: burst \d/);
    const stats = await proxy.stats();
    assert.equal(stats.requests_over_body_budget - before.requests_over_body_budget, refused.length);
    await memoryIdle(proxy);
    assert.equal(proxy.alive, true);
});

/*
 * RFC 8259's rules that cJSON does not keep. A body cJSON accepted but the
 * upstreams' parsers refuse used to get the cached answer of the
 * well-formed body with the same key: `"temperature": 007` was `7`, a raw
 * control character was its escape, "\uZZZZ..." (read as U+0000, where
 * cJSON cuts the string) was "". Each case: what is wrong, the malformed
 * body's text, its well-formed twin (or null), the error's words and byte.
 */
const strictBody = (question, extra) =>
    `{"model":"gpt-4o-mini","messages":[{"role":"user","content":${question}}]${extra}}`;
const STRICT_CASES = (() => {
    const q = (what) => JSON.stringify(h.uniq(`strict ${what}`));
    /* the last: the unique question before it may hold the same digits (a "007" in its id) */
    const at = (text, needle) => Buffer.from(text.slice(0, text.lastIndexOf(needle)), 'utf8').length;
    const cases = [];
    const add = (what, bad, twin, words, needle) =>
        cases.push({what, bad, twin, words, byte: at(bad, needle)});
    let s = q('leading zero');
    add('a number with a leading zero', strictBody(s, ',"temperature":007'),
        strictBody(s, ',"temperature":7'), /a number with a leading zero/, '007');
    s = q('negative leading zero');
    add('a negative number with a leading zero', strictBody(s, ',"seed":-01'),
        strictBody(s, ',"seed":-1'), /a number with a leading zero/, '-01');
    s = q('trailing point');
    add('a number ending in a decimal point', strictBody(s, ',"temperature":1.'),
        strictBody(s, ',"temperature":1'), /a decimal point not followed by a digit/, '.}');
    s = q('point exponent');
    add('a decimal point before an exponent', strictBody(s, ',"temperature":1.e0'),
        strictBody(s, ',"temperature":1'), /a decimal point not followed by a digit/, '.e0');
    s = q('minus point');
    add('a fraction without its integer part', strictBody(s, ',"top_p":-.5'),
        strictBody(s, ',"top_p":-0.5'), /a '-' not followed by a digit/, '-.5');
    const raw = h.uniq('strict raw control');
    add('a raw control character in a string', strictBody(JSON.stringify(raw).replace(/"$/, '\u0001"'), ''),
        strictBody(JSON.stringify(raw + '\u0001'), ''), /a control character \(U\+0001\) not escaped in a string/,
        '\u0001');
    const tab = h.uniq('strict raw tab');
    add('a raw tab in a string', strictBody(`"${tab}\tx"`, ''), strictBody(JSON.stringify(`${tab}\tx`), ''),
        /a control character \(U\+0009\) not escaped in a string/, '\t');
    const zz = h.uniq('strict bad escape');
    add('a \\u escape with bad hex', strictBody(`"${zz}\\uZZZZ secret"`, ''), strictBody(`"${zz}"`, ''),
        /a \\u escape without four hex digits/, '\\uZZZZ');
    s = q('control outside');
    add('a control character between tokens', strictBody(s, ',\u000b"seed":1'), strictBody(s, ',"seed":1'),
        /a control character \(U\+000B\) outside a string/, '\u000b');
    s = q('control after');
    add('a control character after the value', strictBody(s, '') + '\u0001', strictBody(s, ''),
        /a control character \(U\+0001\) outside a string/, '\u0001');
    return cases;
})();

for (const c of STRICT_CASES) {
    h.test(`${c.what}: a 400 naming it and its byte, not its twin's cached answer`, async () => {
        const twin = await env.proxy.post(CHAT, c.twin);
        assert.equal(twin.status, 200, `the twin: ${twin.text.slice(0, 200)}`);
        h.assertHit(await env.proxy.post(CHAT, c.twin));
        const calls = env.mock.callCount();
        const bad = await env.proxy.post(CHAT, c.bad);
        h.assertOpenAIError(bad, 400);
        assert.match(bad.json.error.message, /^request body is not valid JSON: /);
        assert.match(bad.json.error.message, c.words);
        assert.match(bad.json.error.message, new RegExp(` at byte ${c.byte}$`));
        assert.equal(bad.headers['x-cache-status'] === 'HIT', false);
        assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
        h.assertHit(await env.proxy.post(CHAT, c.twin));
    });
}

h.test('bytes that are not UTF-8 in a string are a 400 in either API\'s shape, never stored', async () => {
    const calls = env.mock.callCount();
    const before = (await env.proxy.stats()).cache_stores;
    const bad = [
        [Buffer.from([0xff]), 0], [Buffer.from([0xc0, 0xaf]), 0], /* overlong '/' */
        [Buffer.from([0xed, 0xa0, 0x80]), 0], /* an encoded surrogate */
        [Buffer.from([0xf4, 0x90, 0x80, 0x80]), 0], /* past U+10FFFF */
        [Buffer.from([0x61, 0xe2, 0x82]), 1], /* cut short */
    ];
    for (const [bytes, skip] of bad) {
        for (const path of [CHAT, MESSAGES]) {
            const head = path === CHAT ? '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"'
                : '{"model":"claude-sonnet-4-5","max_tokens":5,"messages":[{"role":"user","content":"';
            const body = Buffer.concat([Buffer.from(head), bytes, Buffer.from('"}]}')]);
            for (let i = 0; i < 2; i++) {
                const r = await env.proxy.post(path, body);
                h.assertApiError(r, path, 400);
                const msg = path === CHAT ? r.json.error.message : r.json.error.message;
                assert.match(msg, new RegExp(`a byte \\(0x${bytes[skip].toString(16).toUpperCase()}\\) ` +
                    `that is not UTF-8 in a string at byte ${head.length + skip}$`));
            }
        }
    }
    assert.equal(env.mock.callCount(), calls, 'nothing reached the upstream');
    assert.equal((await env.proxy.stats()).cache_stores, before, 'nothing stored');
});

h.test('valid JSON is answered and cached as before: escapes, pairs, UTF-8, numbers, deep nesting', async () => {
    const u = h.uniq('strict valid');
    const bodies = [
        strictBody(JSON.stringify(u + ' \ud83d\ude00 é \u007f'), ''),
        strictBody(`"${u} \\ud83d\\ude00 \\u00e9 \\u007F \\/ \\b\\f\\n\\r\\t \\"q\\" \\\\"`, ''),
        strictBody(JSON.stringify(u + ' numbers'),
            ',"temperature":0.5e-3,"top_p":1E+0,"seed":-0,"n":1,"x":12345678901234567890123,"y":-1.25e-7'),
        ' \t\r\n' + strictBody(JSON.stringify(u + ' white'), ' \t\r\n') + ' \n',
        strictBody(JSON.stringify(u + ' deep'), `,"metadata_deep":${'['.repeat(900)}0${']'.repeat(900)}`),
    ];
    for (const body of bodies) {
        const first = await env.proxy.post(CHAT, body);
        assert.equal(first.status, 200, `${body.slice(0, 120)}: ${first.text.slice(0, 200)}`);
        h.assertHit(await env.proxy.post(CHAT, body));
    }
});

/*
 * A byte order mark: RFC 8259 lets a parser ignore it (cJSON, Python's
 * json.loads of bytes) or refuse it (Go, JavaScript). The upstream decides:
 * the body is relayed as sent, never looked up nor stored, so the answer of
 * the same body without the mark is not served for it.
 */
h.test('a body with a byte order mark goes to the upstream as sent, never from nor into the cache', async () => {
    const plain = strictBody(JSON.stringify(h.uniq('strict bom')), '');
    assert.equal((await env.proxy.post(CHAT, plain)).status, 200);
    h.assertHit(await env.proxy.post(CHAT, plain));
    for (let i = 0; i < 2; i++) {
        const calls = env.mock.callCount();
        const r = await env.proxy.post(CHAT, '\ufeff' + plain);
        assert.equal(env.mock.callCount(), calls + 1, 'the upstream was asked');
        /* The mock's JSON.parse refuses the mark: its own 400 is relayed. */
        h.assertOpenAIError(r, 400);
        assert.match(r.json.error.message, /^mock: /);
        assert.notEqual(r.headers['x-cache-status'], 'HIT');
    }
});

/*
 * A model's name is any JSON string: the proxy checks only that it is one
 * and not empty, and sends the body on (the upstream knows its models). The
 * mock puts the name in its openai-model header, percent-encoded when it is
 * not printable ASCII (Node threw on the newline: the mock's handler
 * failed and the request hung). /metrics and the access log stay one line
 * per entry.
 */
h.test('a model name with a newline, a quote or non-ASCII is sent on; the answers come back', async () => {
    for (const model of ['gpt-4o-mini\nX-Injected: 1', 'gpt "4o"\r', 'gpt-4o-mini-ü\u2028']) {
        const body = {...h.chatBody(h.uniq('odd model')), model};
        const r = await env.proxy.post(CHAT, body);
        assert.equal(r.status, 200, r.text.slice(0, 200));
        assert.equal(r.json.model, model);
        assert.equal(r.headers['x-injected'], undefined);
        assert.equal(r.headers['openai-model'], encodeURIComponent(`${model}-2025-01-01`));
        h.assertHit(await env.proxy.post(CHAT, body));
    }
    const metrics = await env.proxy.get('/metrics');
    assert.equal(metrics.status, 200);
    for (const line of metrics.text.split('\n').filter((l) => l !== '' && !l.startsWith('#')))
        assert.match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*(\{.*\})? \S+$/, `a /metrics line: ${line.slice(0, 120)}`);
    for (const entry of env.proxy.accessLog())
        assert.equal(typeof entry, 'object');
});

h.test('TLS or HTTP/2 sent to the plain port: an error at once, not a hang', async () => {
    /*
     * A ClientHello has no blank line to end a request head, so the proxy waited for more
     * (client-timeout, 60 s by default) and the client hung without a word. The first bytes
     * that cannot start an HTTP/1.x request now get a 400 and the connection closes.
     */
    const hello = Buffer.from('16030100c4010000c00303' + '5a'.repeat(32) + '00', 'hex');
    const c = await h.RawConnection.open(env.proxy.port);
    c.send(hello);
    const r = await c.response();
    assert.equal(r.status, 400);
    assert.equal(r.json.error.message, 'Malformed HTTP request.');
    assert.ok(await c.closedByServer());
    c.close();
    /* A real TLS client fails its handshake at once instead of waiting. */
    const tls = require('node:tls');
    const err = await h.withDeadline(new Promise((resolve) => {
        const s = tls.connect({port: env.proxy.port, host: '127.0.0.1', rejectUnauthorized: false});
        s.on('error', (e) => { s.destroy(); resolve(e); });
        s.on('secureConnect', () => { s.destroy(); resolve(null); });
    }), 10000, 'the TLS client\'s handshake error');
    assert.ok(err instanceof Error, 'the handshake fails');
    /* HTTP/2 with prior knowledge: its preface is a request line of version 2.0. */
    const c2 = await h.RawConnection.open(env.proxy.port);
    const r2 = await c2.roundtrip('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n');
    assert.equal(r2.status, 505);
    assert.ok(await c2.closedByServer());
    c2.close();
    assert.equal((await env.proxy.get('/healthz')).status, 200, 'the proxy serves on');
});
