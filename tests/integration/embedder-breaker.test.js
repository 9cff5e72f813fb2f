'use strict';
/*
 * The remote embedder's circuit breaker, through the real binary: with
 * `embedder openai` pointed at an embedder that accepts connections and
 * never answers, or answers 500, the breaker opens after
 * embedder-breaker-failures failed calls in a row; then requests go on
 * without the embedder (the semantic stage is skipped, answers are stored
 * without a vector, exact hits still work) and the embedder sees no call but
 * the breaker's probes, one stored answer's embedding per cool-down (a
 * lookup's when nothing is stored); a probe that gets an answer closes it. /stats, /metrics and the log say so.
 * Nothing here depends on how long anything takes: every assertion is on
 * counts the proxy and the embedder keep.
 */
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const h = require('./lib');
const {bagOfWords} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};

/*
 * An embedder on one port that does what mode says: 'stall' (raw TCP: the
 * connection is accepted and what is sent is read, never answered), 'fail'
 * (HTTP 500), 'ok' (OpenAI-shaped bag-of-words embeddings, as
 * tests/mock/semantic.js makes them) or 'repeat' (the same, each data item
 * twice: a vector for every input all the same). A connection keeps the mode it was
 * accepted in. Counts connections, requests (in every mode) and inputs.
 */
class Embedder {
    constructor(mode) {
        this.mode = mode;
        this.connections = 0;
        this.requests = 0;
        this.inputs = 0;
        this.sockets = new Set();
        this.http = http.createServer((req, res) => this._request(req, res));
        this.server = net.createServer((sock) => this._accept(sock));
    }

    listen() {
        return new Promise((resolve) => this.server.listen(0, '127.0.0.1', () => {
            this.url = `http://127.0.0.1:${this.server.address().port}`;
            resolve(this);
        }));
    }

    close() {
        for (const s of this.sockets)
            s.destroy();
        return new Promise((resolve) => this.server.close(() => resolve()));
    }

    _accept(sock) {
        this.connections++;
        this.sockets.add(sock);
        sock.on('close', () => this.sockets.delete(sock));
        sock.on('error', () => {});
        if (this.mode !== 'stall') {
            this.http.emit('connection', sock);
            return;
        }
        let text = '';
        sock.on('data', (d) => {
            text += d.toString('latin1');
            const lines = text.match(/^POST /gm) || [];
            this.requests += lines.length;
            text = text.slice(text.lastIndexOf('\n') + 1);
        });
    }

    _request(req, res) {
        const chunks = [];
        req.on('data', (c) => chunks.push(c));
        req.on('end', () => {
            this.requests++;
            const send = (status, obj) => {
                const text = JSON.stringify(obj);
                res.writeHead(status, {'content-type': 'application/json', 'content-length': Buffer.byteLength(text)});
                res.end(text);
            };
            if (this.mode !== 'ok' && this.mode !== 'repeat')
                return send(500, {error: {message: 'embedder failure', type: 'server_error'}});
            const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
            const texts = Array.isArray(body.input) ? body.input : [body.input];
            this.inputs += texts.length;
            const data = texts.map((t, index) => ({object: 'embedding', index, embedding: bagOfWords(t)}));
            send(200, {object: 'list', model: body.model,
                data: this.mode === 'repeat' ? data.flatMap((d) => [d, d]) : data,
                usage: {prompt_tokens: texts.length, total_tokens: texts.length}});
        });
    }
}

/* Run fn with an embedder in mode, closed however fn ends (the test's process waits for it). */
async function withEmbedder(mode, fn) {
    const emb = await new Embedder(mode).listen();
    try {
        await fn(emb);
    } finally {
        await emb.close();
    }
}

function start(emb, extra) {
    return env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai', '--embedder-url', emb.url,
        '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9', '--embedder-timeout', '200',
        '--log-level', 'info', ...extra]});
}

function assertMiss(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'MISS', 'X-Cache-Status');
}

const question = (words) => h.chatBody(`${words} ${h.uniq('q').split(' ')[1]}`);

/* Ask distinct questions (each a miss that stores its answer, unless headers say no) until
 * the breaker is in state. */
async function missUntil(p, state, what, headers = {}) {
    let asked = 0;
    await h.waitFor(async () => {
        assertMiss(await p.post(CHAT, question('what is the capital of peru'), headers));
        asked++;
        return (await p.stats()).embedder_breaker === state;
    }, {timeout: 20000, what: () => `${what} (${asked} questions asked)`});
    return asked;
}

async function gauge(p) {
    const m = /^promptcache_embedder_breaker_open (\d+)$/m.exec((await p.get('/metrics')).text);
    return m ? Number(m[1]) : null;
}

function logLines(p, re) {
    return p.stderr.split('\n').filter((l) => re.test(l));
}

/*
 * The log lines matching re once at least min of them are in: the proxy writes them before
 * /stats can show the state they tell of, but the log pipe may be read after /stats answered.
 */
function loggedLines(p, re, what, min = 1) {
    return h.waitFor(() => {
        const lines = logLines(p, re);
        return lines.length >= min ? lines : null;
    }, {what});
}

h.test('a stalled embedder: the breaker opens and requests go on without it',
    () => withEmbedder('stall', async (emb) => {
    /*
     * A cool-down far longer than this test: no probe, so the embedder must see nothing more.
     * One worker: a miss's vector is skipped (counted) just after its answer is sent, and
     * /stats, answered by the same worker, comes after that; with two, the other worker could
     * answer it before (s0 or s1 one short).
     */
    const p = await start(emb, ['--embedder-breaker-failures', '3', '--embedder-breaker-cooldown', '600000',
        '--workers', '1']);
    assert.equal((await p.stats()).embedder_breaker, 'closed');
    assert.equal(await gauge(p), 0);
    await missUntil(p, 'open', 'the breaker to open');
    const s0 = await p.stats();
    assert.equal(s0.embedder_breaker_opens, 1);
    assert.ok(s0.semantic_embed_errors >= 3, `semantic_embed_errors ${s0.semantic_embed_errors}`);
    assert.equal(await gauge(p), 1);
    const warned = await loggedLines(p, / W embedder http:\/\/127\.0\.0\.1:\d+: 3 calls in a row failed/,
        'the warning that the breaker opened');
    assert.equal(warned.length, 1, p.stderr);

    /* Everything sent before it opened has arrived: from now on the embedder sees nothing. */
    const seen = {connections: emb.connections, requests: emb.requests};
    const stored = question('how many legs does a spider have');
    assertMiss(await p.post(CHAT, stored));
    for (let i = 0; i < 20; i++)
        assertMiss(await p.post(CHAT, question('what is the capital of chile')));
    h.assertHit(await p.post(CHAT, stored)); /* the exact stage still works */
    const s1 = await p.stats();
    assert.equal(s1.semantic_breaker_skips - s0.semantic_breaker_skips, 21, 'every lookup skipped the stage');
    assert.equal(s1.semantic_lookups, s0.semantic_lookups, 'no lookup waited for the embedder');
    assert.equal(s1.semantic_shed, s0.semantic_shed);
    assert.equal(s1.semantic_vectors_skipped - s0.semantic_vectors_skipped, 21, 'stored without a vector');
    assert.equal(s1.semantic_embed_calls, s0.semantic_embed_calls);
    assert.equal(s1.embedder_breaker_probes, 0);
    assert.deepEqual({connections: emb.connections, requests: emb.requests}, seen, 'the embedder was not called');
    assert.equal(s1.embedder_breaker, 'open');
}));

h.test('an embedder answering 500: each failure counted once, a probe per cool-down, back when it answers',
    () => withEmbedder('fail', async (emb) => {
    const p = await start(emb, ['--embedder-breaker-failures', '2', '--embedder-breaker-cooldown', '200']);
    await missUntil(p, 'open', 'the breaker to open');
    /* Every call the embedder got failed, and each failure is counted once (once every
     * answer has come back: a put's call may still be on its way). */
    const s0 = await h.waitFor(async () => {
        const s = await p.stats();
        return s.semantic_embed_calls === emb.requests && s.semantic_embed_errors >= s.semantic_embed_calls
            ? s : null;
    }, {what: () => `the ${emb.requests} calls the embedder saw to be counted, and their failures`});
    assert.ok(s0.semantic_embed_calls >= 2);
    assert.equal(s0.semantic_embed_errors, s0.semantic_embed_calls, 'one error per failed call');

    /* After the cool-down a stored answer's embedding probes it: it fails, the breaker stays
     * open, and the embedder saw the probes and nothing else. */
    const before = {requests: emb.requests, probes: s0.embedder_breaker_probes};
    let s1 = null;
    await h.waitFor(async () => {
        assertMiss(await p.post(CHAT, question('what is the capital of bolivia')));
        s1 = await p.stats();
        return s1.embedder_breaker_probes >= before.probes + 2 && s1.embedder_breaker === 'open';
    }, {timeout: 20000, what: 'two failed probes'});
    s1 = await h.waitFor(async () => {
        const s = await p.stats();
        return emb.requests === before.requests + s.embedder_breaker_probes - before.probes &&
            s.semantic_embed_errors >= s.semantic_embed_calls ? s : null;
    }, {what: () => `the embedder to have seen the probes only (${emb.requests - before.requests} calls)`});
    assert.equal(s1.semantic_embed_calls - s0.semantic_embed_calls, s1.embedder_breaker_probes - before.probes);
    assert.equal(s1.semantic_embed_errors, s1.semantic_embed_calls);
    assert.equal(s1.embedder_breaker_opens, 1, 're-opened after a probe, not opened anew');
    await loggedLines(p, / I embedder .*the probe failed/, 'two failed probes in the log', 2);
    assert.equal(logLines(p, / W embedder .*calls in a row failed/).length, 1);

    /* The embedder is well again: the next probe closes the breaker. */
    emb.mode = 'ok';
    await missUntil(p, 'closed', 'the breaker to close');
    assert.equal(await gauge(p), 0);
    assert.equal((await loggedLines(p, / N embedder .*answers again/, 'the notice that it answers again')).length,
        1, p.stderr);
    /* Semantic lookups are back: a stored question is found by meaning. */
    const t = h.uniq('q').split(' ')[1];
    assertMiss(await p.post(CHAT, h.chatBody(`how tall is the eiffel tower ${t}`)));
    await h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(`the eiffel tower ${t}: how tall is`), NO_STORE);
        assert.equal(r.headers['x-cache-match'], 'semantic', r.headers['x-cache-status']);
    });
    const s2 = await p.stats();
    assert.ok(s2.semantic_lookups > s1.semantic_lookups);
    assert.equal(s2.embedder_breaker, 'closed');
}));

h.test('traffic that stores nothing: a lookup probes once no stored answer has for a while',
    () => withEmbedder('fail', async (emb) => {
    const p = await start(emb, ['--embedder-breaker-failures', '2', '--embedder-breaker-cooldown', '200']);
    await missUntil(p, 'open', 'the breaker to open', NO_STORE);
    emb.mode = 'ok';
    await missUntil(p, 'closed', 'a lookup\'s probe to close the breaker', NO_STORE);
    const s = await p.stats();
    assert.ok(s.embedder_breaker_probes >= 1);
    assert.equal(s.semantic_vectors_skipped, 0, 'nothing was stored');
}));

/*
 * Items are matched to inputs by their index, and an answer is whole when every input got
 * its vector: items were counted instead, so an embedder (or a gateway in front of it) that
 * repeats each item had every call of one input counted as a failure, and its breaker opened
 * after three, although every lookup got its vector.
 */
h.test('an answer that repeats its items is not a failure: every input got its vector',
    () => withEmbedder('repeat', async (emb) => {
    const p = await start(emb, []);
    for (let i = 0; i < 6; i++)
        assertMiss(await p.post(CHAT, question('what is the capital of chile'), NO_STORE));
    const s = await h.waitFor(async () => {
        const st = await p.stats();
        return st.semantic_embed_calls === emb.requests ? st : null;
    }, {what: () => `the proxy's count of calls to match the embedder's ${emb.requests}`});
    assert.equal(s.semantic_embed_errors, 0);
    assert.equal(s.embedder_breaker, 'closed');
    assert.equal(s.embedder_breaker_opens, 0);
    const q = `what is the capital of bolivia ${h.uniq('q').split(' ')[1]}`;
    assertMiss(await p.post(CHAT, h.chatBody(q)));
    await h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(`${q}?`), NO_STORE);
        assert.equal(r.headers['x-cache-match'], 'semantic');
    });
}));

h.test('embedder-breaker-failures 0: the breaker never opens, each failure still counted once',
    () => withEmbedder('fail', async (emb) => {
    const p = await start(emb, ['--embedder-breaker-failures', '0']);
    /* no-store: no put embeds in the background, so each request's one call has failed (and
     * been counted) by the time it is answered, unless its lookup gave up first */
    for (let i = 0; i < 6; i++)
        assertMiss(await p.post(CHAT, question('what is the capital of ecuador'), NO_STORE));
    const s = await h.waitFor(async () => {
        const st = await p.stats();
        return st.semantic_embed_calls === emb.requests && st.semantic_embed_errors >= st.semantic_embed_calls
            ? st : null;
    }, {what: () => `the proxy's count of calls and failures to match the embedder's ${emb.requests}`});
    assert.equal(emb.requests, 6);
    assert.equal(s.semantic_embed_errors, s.semantic_embed_calls);
    assert.equal(s.embedder_breaker, 'closed');
    assert.equal(s.embedder_breaker_opens, 0);
    assert.equal(s.semantic_breaker_skips, 0);
}));

h.test('the log names the embedder without the password or query of embedder-url', () => withEmbedder('fail', async (emb) => {
    const port = new URL(emb.url).port;
    const p = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', `http://promptcache:s3cretpw@127.0.0.1:${port}/v1/embeddings?key=s3cretkey`,
        '--embedder-model', 'mock-bow', '--embedder-timeout', '200', '--embedder-breaker-failures', '2',
        '--log-level', 'info']});
    await missUntil(p, 'open', 'the breaker to open');
    /* The lines are written before /stats says open, but the log pipe may be read after it. */
    const wanted = [/ W embedder http:\/\/127\.0\.0\.1:\d+\/v1\/embeddings: 2 calls in a row failed/,
        / I embedder http:\/\/127\.0\.0\.1:\d+\/v1\/embeddings: error answer/];
    await h.waitFor(() => wanted.every((re) => logLines(p, /embedder /).some((l) => re.test(l))),
        {what: () => `the breaker's and the batch's lines, host and path only:\n${logLines(p, /embedder /).join('\n')}`});
    assert.doesNotMatch(p.stderr, /s3cret/, 'no secret of the URL in the log');
    await p.stop();
}));

h.test('without embedder-model the space is named by the host, never by a part of the password', () => withEmbedder('ok', async (emb) => {
    const port = new URL(emb.url).port;
    const p = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', `http://promptcache:pw@s3cret@127.0.0.1:${port}`]});
    const st = await p.stats();
    assert.equal(st.semantic_space, `openai:@127.0.0.1:${port}`);
    assert.doesNotMatch((await p.get('/metrics')).text, /s3cret/);
    await p.stop();
}));
