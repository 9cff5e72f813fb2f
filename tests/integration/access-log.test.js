'use strict';
/*
 * The access log: one JSON object per request line, with the fields an
 * operator needs, and never a credential or prompt text (neither there nor
 * in the daemon log).
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment();

const CHAT = '/v1/chat/completions';
const SECRET = 'sk-very-secret-credential-4711';
const FIELDS = ['id', 'tenant', 'method', 'path', 'endpoint', 'model', 'status', 'cache', 'ms',
    'upstream_ms', 'bytes_out'];

/*
 * Make a request and return its access log line, found by the id the answer
 * carries (X-Promptcache-Request-Id): a line is written as its request ends,
 * so the next new line may still be an earlier request's.
 */
async function logged(fn) {
    const res = await fn();
    const id = res.headers['x-promptcache-request-id'];
    assert.ok(id, `X-Promptcache-Request-Id on a ${res.status}`);
    const line = await env.proxy.waitAccessLog((l) => l.id === id);
    return {res, line};
}

h.test('every line is a JSON object with the documented fields', async () => {
    const {line} = await logged(() => env.proxy.post(CHAT, h.chatBody(h.uniq('fields'))));
    for (const f of FIELDS)
        assert.ok(f in line, `field ${f} in ${JSON.stringify(line)}`);
});

h.test('a miss and a hit are described correctly', async () => {
    const body = h.chatBody(h.uniq('miss and hit'));
    const miss = await logged(() => env.proxy.post(CHAT, body, h.bearer(SECRET)));
    const hit = await logged(() => env.proxy.post(CHAT, body, h.bearer(SECRET)));
    for (const {res, line} of [miss, hit]) {
        assert.equal(line.method, 'POST');
        assert.equal(line.path, CHAT);
        assert.equal(line.endpoint, 'chat');
        assert.equal(line.model, h.CHAT_MODEL);
        assert.equal(line.status, 200);
        assert.match(line.tenant, /^[0-9a-f]{16}$/);
        assert.equal(typeof line.ms, 'number');
        assert.ok(line.ms >= 0);
        assert.equal(line.bytes_out >= res.body.length, true, `bytes_out ${line.bytes_out}`);
    }
    assert.equal(miss.line.cache, 'MISS');
    assert.equal(hit.line.cache, 'HIT');
    assert.equal(typeof miss.line.upstream_ms, 'number');
    assert.ok(miss.line.upstream_ms >= 0);
    assert.equal(miss.line.tenant, hit.line.tenant, 'same credential, same tenant');
    assert.notEqual(miss.line.id, hit.line.id, 'request ids are unique');
});

h.test('tenants differ per credential', async () => {
    const body = h.chatBody(h.uniq('tenant ids'));
    const a = await logged(() => env.proxy.post(CHAT, body, h.bearer('sk-log-a')));
    const b = await logged(() => env.proxy.post(CHAT, body, h.bearer('sk-log-b')));
    assert.notEqual(a.line.tenant, b.line.tenant);
});

h.test('Anthropic, embeddings and errors are logged too', async () => {
    const msg = await logged(() => env.proxy.post('/v1/messages', h.messagesBody(h.uniq('log claude'))));
    assert.equal(msg.line.endpoint, 'messages');
    assert.equal(msg.line.model, h.CLAUDE_MODEL);
    const emb = await logged(() => env.proxy.post('/v1/embeddings', h.embeddingBody(h.uniq('log emb'))));
    assert.equal(emb.line.endpoint, 'embeddings');
    const bad = await logged(() => env.proxy.post(CHAT, '{broken'));
    assert.equal(bad.line.status, 400);
    const err = await logged(() => env.proxy.post(CHAT, h.chatBody(h.uniq('log 500')), {'x-mock-status': '500'}));
    assert.equal(err.line.status, 500);
});

h.test('ids in the access log are unique', async () => {
    const ids = env.proxy.accessLog().map((l) => l.id);
    assert.ok(ids.length >= 8);
    assert.equal(new Set(ids).size, ids.length);
});

h.test('no credential and no prompt text in the access log or the daemon log', async () => {
    const prompt = h.uniq('TOP-SECRET-PROMPT-TEXT');
    await logged(() => env.proxy.post(CHAT, h.chatBody(prompt), h.bearer(SECRET)));
    await logged(() => env.proxy.post('/v1/messages', h.messagesBody(prompt), h.apiKey(`${SECRET}-ant`)));
    await logged(() => env.proxy.post(CHAT, h.chatBody(prompt), {'api-key': `${SECRET}-azure`}));
    for (const [what, text] of [['access log', env.proxy.accessLogText()], ['daemon log', env.proxy.stderr]]) {
        assert.ok(!text.includes(SECRET), `a credential appears in the ${what}`);
        assert.ok(!text.includes('TOP-SECRET-PROMPT-TEXT'), `prompt text appears in the ${what}`);
        assert.ok(!text.includes('Bearer'), `an Authorization value appears in the ${what}`);
    }
});

h.test('every line is valid UTF-8, whatever bytes the request carried', async () => {
    /*
     * The model was written as it came, cut at 200 bytes: a cut through a character, or raw
     * bytes that are no UTF-8 at all (cJSON takes them), put invalid UTF-8 in a line that
     * log shippers refuse or mangle. Now the cut falls before the character and such bytes
     * are written as U+FFFD. A body with such bytes is now refused (400, RFC 8259): its line is
     * written all the same.
     */
    const fs = require('node:fs');
    const strict = new TextDecoder('utf-8', {fatal: true});
    const long = `${'a'.repeat(199)}\u00e9`;
    const cut = await logged(() => env.proxy.post(CHAT, h.chatBody(h.uniq('utf8 cut'), {model: long})));
    assert.equal(cut.line.model, 'a'.repeat(199), 'cut before the two-byte character');
    const raw = Buffer.concat([Buffer.from('{"model":"bad'), Buffer.from([0xff, 0xc3, 0x01]),
        Buffer.from(`","messages":[{"role":"user","content":"${h.uniq('utf8 raw')}"}]}`)]);
    const bad = await logged(() => env.proxy.post(CHAT, raw));
    assert.equal(bad.res.status, 400);
    assert.equal(bad.line.status, 400);
    for (const line of fs.readFileSync(env.proxy.accessLogPath).toString('latin1').split('\n')) {
        const bytes = Buffer.from(line, 'latin1');
        assert.doesNotThrow(() => strict.decode(bytes), `not UTF-8: ${line.slice(0, 300)}`);
    }
});

h.test('a raw non-ASCII request target is answered and logged as valid UTF-8', async () => {
    /*
     * A request target may carry raw bytes above 0x7f (obs-text; clients that do not
     * percent-encode): the request is answered like any other, its path logged with each byte
     * that is not UTF-8 as U+FFFD, and UTF-8 in it kept as it is.
     */
    const fs = require('node:fs');
    const strict = new TextDecoder('utf-8', {fatal: true});
    const cases = [
        [Buffer.from([0x2f, 0x76, 0x31, 0x2f, 0x6d, 0x6f, 0x64, 0xe9, 0x6c, 0x73, 0x2f, 0xff, 0xfe]),
            '/v1/mod\ufffdls/\ufffd\ufffd'],
        [Buffer.from('/v1/caf\u00e9/\u4e2d', 'utf8'), '/v1/caf\u00e9/\u4e2d'],
        [Buffer.concat([Buffer.from('/v1/x'), Buffer.from([0xe4, 0xb8]), Buffer.from('/y')]), '/v1/x\ufffd\ufffd/y'],
    ];
    for (const [target, want] of cases) {
        const c = await h.RawConnection.open(env.proxy.port);
        c.send(Buffer.concat([Buffer.from('GET '), target,
            Buffer.from(' HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk-raw-target\r\nConnection: close\r\n\r\n')]));
        const r = await c.response();
        c.close();
        assert.equal(r.status, 404, `the mock upstream's answer to an unknown path: ${r.body}`);
        const id = r.headers['x-promptcache-request-id'];
        assert.ok(id, 'answered by the proxy');
        const line = await env.proxy.waitAccessLog((l) => l.id === id);
        assert.equal(line.path, want);
        assert.equal(line.status, 404);
    }
    for (const line of fs.readFileSync(env.proxy.accessLogPath).toString('latin1').split('\n'))
        assert.doesNotThrow(() => strict.decode(Buffer.from(line, 'latin1')), `not UTF-8: ${line.slice(0, 300)}`);
});

h.test('a log that cannot be written is said once, where it can be read; requests are answered', async () => {
    /*
     * A full disk (here /dev/full) took every line of a log file without a word: the proxy
     * ran and served, its log empty, nothing said anywhere. The daemon log's failure is now
     * said on stderr, the access log's in the daemon log, each once.
     */
    const access = await env.startProxy({args: ['--access-log', '/dev/full']});
    try {
        for (let i = 0; i < 3; i++) {
            const r = await access.post(CHAT, h.chatBody(h.uniq(`full disk ${i}`)));
            assert.equal(r.status, 200, r.text);
        }
        await h.waitFor(() => /cannot write to access-log \/dev\/full: No space left on device/.test(access.stderr),
            {what: 'the access log failure in the daemon log'});
        assert.equal(access.stderr.match(/cannot write to access-log/g).length, 1, 'said once');
    } finally {
        await access.stop();
    }
    const port = await h.freePort(); /* its own log cannot name it: that log is lost */
    const proc = h.spawnTracked('promptcache log-file /dev/full', h.proxyBin(), [
        '--listen', `127.0.0.1:${port}`, '--upstream', env.mock.url, '--redis', env.redis.url,
        '--log-file', '/dev/full', '--access-log', 'off'], {cwd: h.tmpDir('pc-full-')});
    try {
        await h.waitFor(async () => (await h.request(`http://127.0.0.1:${port}`, {path: '/healthz'})
            .catch(() => ({status: 0}))).status === 200, {what: 'GET /healthz == 200'});
        await h.waitFor(() => /cannot write to log-file \/dev\/full: No space left on device/.test(proc.stderr),
            {what: 'the log file failure on stderr'});
        assert.equal(proc.stderr.match(/cannot write to log-file/g).length, 1, 'said once');
    } finally {
        assert.equal(await proc.terminate(15000), 0, 'exit code');
    }
});

h.test('a client-chosen string never forges a line of the daemon log', async () => {
    /*
     * The model a request names reached the daemon log as it came: a second instance (or this
     * one after a restart) serving a hit of a model the price list lacks warned with it raw,
     * so a model with a line break wrote a line of the client's choosing. Control characters
     * of any message are now written as \xNN.
     */
    const forged = `2026-01-01T00:00:00.000Z 1 E FORGED-${h.uniq('line').replace(/\W/g, '')}`;
    const body = h.chatBody(h.uniq('forged log line'), {model: `no-such-model\n${forged}\r\u001b[2J`});
    const miss = await env.proxy.post(CHAT, body);
    assert.equal(miss.status, 200, miss.text);
    const other = await env.startProxy();
    try {
        const hit = await other.post(CHAT, body);
        assert.equal(hit.status, 200, hit.text);
        assert.equal(hit.headers['x-cache-status'], 'HIT');
        await h.waitFor(() => other.stderr.includes(forged.slice(25)), {what: 'the warning naming the model'});
        for (const line of other.stderr.split('\n')) {
            assert.ok(!line.startsWith(forged.slice(0, 30)), `a forged line: ${line}`);
            assert.ok(!/[\u0000-\u0008\u000b-\u001f\u007f]/.test(line), `a control character: ${JSON.stringify(line)}`);
        }
        assert.ok(other.stderr.includes('no-such-model\\x0a2026-01-01T'), 'the line break written as \\x0a');
    } finally {
        await other.stop();
    }
});
