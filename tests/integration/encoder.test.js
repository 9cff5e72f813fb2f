'use strict';
/*
 * `embedder openai` against a real sentence encoder: Universal Sentence
 * Encoder lite behind OpenAI's embeddings API (tests/encoder/server.js, a
 * process of its own, installed by `make encoder`). The mock embedder of
 * semantic.test.js matches rewordings of the same words; this one matches
 * by meaning, so these tests check what a user of a real model gets: a
 * paraphrase with other words hits at the default threshold (where the
 * builtin embedder misses it), the guards still reject look-alikes the model
 * puts closer than any paraphrase, and an encoder that dies or stalls costs
 * the semantic stage only: every request is answered, exact hits go on.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {startEncoder} = require('../encoder/index.js');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const MODEL = 'universal-sentence-encoder-lite';

let enc = null;
let proxy = null;

/* The proxy's options for the encoder; a generous embedder-timeout keeps hits from being shed under ASan. */
const encArgs = (extra = []) => ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai', '--embedder-url', enc.url,
    '--embedder-model', MODEL, '--embedder-timeout', '5000', ...extra];

const chat = (text) => h.chatBody(text);
/* A namespace per test keeps every other test's questions from being candidates. */
const space = (label) => ({'X-Cache-Namespace': `${label}-${h.uniq('n').split(' ')[1]}`});

/* Direct calls to the encoder, as the proxy makes them. */
function embed(body) {
    return h.request(enc.url, {method: 'POST', path: '/v1/embeddings', body});
}

async function cosine(a, b) {
    const r = await embed({model: MODEL, input: [a, b]});
    assert.equal(r.status, 200, r.text);
    const [x, y] = r.json.data.map((d) => d.embedding);
    return x.reduce((s, v, i) => s + v * y[i], 0);
}

function assertSemanticHit(res) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-cache-status'], 'HIT', 'X-Cache-Status');
    assert.equal(res.headers['x-cache-match'], 'semantic', 'X-Cache-Match');
    assert.match(String(res.headers['x-cache-similarity']), /^[01]\.\d{4}$/, 'X-Cache-Similarity');
}

function assertMiss(res) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-cache-status'], 'MISS', `X-Cache-Status (${res.headers['x-cache-match']})`);
}

/*
 * Ask text (a MISS that stores its answer) and wait until its own vector is in p's index: text
 * with a trailing space (another exact key; white space changes no vector) is asked with
 * no-store until it hits by meaning. A count of vectors is moved by the previous question's
 * too, whose vector a slow embed puts after its answer was sent.
 */
async function store(p, text, headers) {
    const r = await p.post(CHAT, chat(text), headers);
    assertMiss(r);
    await h.eventually(async () => {
        const again = await p.post(CHAT, chat(`${text} `), {...headers, 'Cache-Control': 'no-store'});
        assert.equal(again.headers['x-cache-match'], 'semantic',
            `the vector of "${text}" in the index (${again.headers['x-cache-status']})`);
    }, {timeout: 20000});
    return r;
}

/*
 * Questions and a rewording of each with other words, which the encoder puts
 * at about 0.94 (default 0.92) and the builtin embedder at 0.62 and 0.72
 * (default 0.85).
 */
const PARAPHRASES = [
    ['What are some healthy snacks for kids?', 'What are nutritious snacks for children?'],
    ['How do I convert a string to an integer in JavaScript?', 'How can I turn a string into a number in JavaScript?'],
];

h.test('set up: the encoder and a proxy on it', async () => {
    enc = await startEncoder();
    proxy = await env.startProxy({args: encArgs()});
});

h.test('the encoder speaks OpenAI\'s embeddings API with unit vectors of meaning', async () => {
    const one = await embed({model: 'my-model', input: 'How do I reverse a list in Python?'});
    assert.equal(one.status, 200, one.text);
    assert.equal(one.json.object, 'list');
    assert.equal(one.json.model, 'my-model', 'the model is echoed');
    assert.equal(one.json.data.length, 1);
    const v = one.json.data[0].embedding;
    assert.equal(v.length, 512);
    assert.ok(Math.abs(Math.hypot(...v) - 1) < 1e-5, `unit length, not ${Math.hypot(...v)}`);
    assert.ok(one.json.usage.prompt_tokens > 0 && one.json.usage.total_tokens === one.json.usage.prompt_tokens,
        JSON.stringify(one.json.usage));

    const texts = ['first text', 'a second, longer text', 'third'];
    const many = await embed({model: MODEL, input: texts});
    assert.deepEqual(many.json.data.map((d) => d.index), [0, 1, 2]);
    const b64 = await embed({model: MODEL, input: texts, encoding_format: 'base64'});
    assert.equal(b64.status, 200, b64.text);
    const raw = Buffer.from(b64.json.data[1].embedding, 'base64');
    const decoded = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.length));
    assert.equal(decoded.length, 512);
    many.json.data[1].embedding.forEach((x, i) => assert.ok(Math.abs(x - decoded[i]) < 1e-6, `base64 [${i}]`));

    /* A model, not word overlap: a rewording with other words is nearer than a question sharing words. */
    const para = await cosine('How do I reverse a list in Python?', 'What is the way to invert the order of a Python list?');
    const other = await cosine('How do I reverse a list in Python?', 'How do I reverse a car with a trailer?');
    assert.ok(para > other + 0.2, `paraphrase ${para} vs shared words ${other}`);
    /* White space is normalised as the model's SentencePiece set-up did: extra spaces change nothing. */
    const spaced = await cosine('How do I reverse a list in Python?', '  How do I   reverse a list\tin Python? ');
    assert.ok(spaced > 0.9999, `extra white space moves the vector: cosine ${spaced}`);

    for (const [body, what] of [
        [{model: MODEL, input: [101, 2023, 102]}, 'a token array'],
        [{model: MODEL, input: [[101, 2023], [102]]}, 'token arrays'],
        [{model: MODEL, input: ''}, 'an empty string'],
        [{model: MODEL, input: []}, 'no input'],
        [{input: 'no model'}, 'no model'],
        [{model: MODEL, input: 'x', dimensions: 256}, 'other dimensions'],
        ['{"model": "m", "input": ', 'cut JSON'],
    ]) {
        const r = await embed(body);
        h.assertOpenAIError(r, 400);
        assert.equal(r.json.error.type, 'invalid_request_error', what);
    }
});

h.test('a paraphrase hits by meaning at the default threshold; the builtin embedder misses it', async () => {
    const builtin = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'builtin']});
    const st = await proxy.stats();
    assert.equal(st.semantic_space, `openai:${MODEL}`);
    assert.equal(st.semantic_threshold, 0.92, 'semantic-threshold auto with embedder openai');
    for (const [i, [a, b]] of PARAPHRASES.entries()) {
        const ns = space(`para${i}`);
        const first = await store(proxy, a, ns);
        const calls = env.mock.callCount(CHAT);
        const hit = await proxy.post(CHAT, chat(b), ns);
        assertSemanticHit(hit);
        assert.equal(env.mock.callCount(CHAT), calls, 'no upstream call');
        assert.deepEqual(hit.json.choices, first.json.choices, 'the stored answer');
        assert.ok(Number(hit.headers['x-cache-similarity']) >= st.semantic_threshold);

        const bns = space(`bpara${i}`);
        await store(builtin, a, bns);
        assertMiss(await builtin.post(CHAT, chat(b), bns));
    }
    const after = await proxy.stats();
    assert.ok(after.semantic_embed_calls > st.semantic_embed_calls);
    assert.ok(after.semantic_embed_tokens > st.semantic_embed_tokens, 'the encoder\'s usage is counted');
    assert.equal(after.semantic_embed_errors, 0);
    await builtin.stop();
});

/* Look-alikes of other meaning: the encoder puts each above the default threshold. */
const COUNTERFEITS = [
    ['convert 10 usd to eur', 'convert 20 usd to eur', 'numbers'],
    ['is it safe to drink tap water in Lisbon', 'is it not safe to drink tap water in Lisbon', 'negation'],
    ['what will the weather be like in Berlin today', 'what will the weather be like in Berlin tomorrow', 'dates'],
    ['cheapest flights from Paris to Rome', 'cheapest flights from Rome to Paris', 'direction'],
    ['How do I sort a list in ascending order in Python?', 'How do I sort a list in descending order in Python?',
        'antonyms'],
];

h.test('a blank last turn is never sent to the encoder (it refuses empty input), and the exact cache serves it', async () => {
    const ns = space('blank');
    for (const blank of ['', '  \n\t ']) {
        const before = await proxy.stats();
        const first = await proxy.post(CHAT, chat(blank), ns);
        assertMiss(first);
        h.assertHit(await proxy.post(CHAT, chat(blank), ns));
        const after = await proxy.stats();
        assert.equal(after.semantic_embed_errors, before.semantic_embed_errors, 'no embedding refused');
        assert.equal(after.semantic_lookups, before.semantic_lookups, 'no lookup by meaning');
    }
});

h.test('the guards reject look-alikes the encoder puts above the threshold', async () => {
    const threshold = (await proxy.stats()).semantic_threshold;
    for (const [a, b, guard] of COUNTERFEITS) {
        const sim = await cosine(a, b);
        assert.ok(sim >= threshold, `${guard}: the encoder puts "${a}" / "${b}" at ${sim}, under ${threshold}`);
    }
    const rejects = (await proxy.stats()).semantic_guard_rejects;
    for (const [i, [a, b, guard]] of COUNTERFEITS.entries()) {
        const ns = space(`fake${i}`);
        await store(proxy, a, ns);
        const r = await proxy.post(CHAT, chat(b), ns);
        assert.equal(r.headers['x-cache-status'], 'MISS', `${guard}: "${b}" must not be served "${a}"'s answer`);
    }
    const st = await proxy.stats();
    assert.ok(st.semantic_guard_rejects >= rejects + COUNTERFEITS.length,
        `semantic_guard_rejects ${rejects} -> ${st.semantic_guard_rejects}`);

    /* The guards are what stops them: without any, the same look-alikes are served. */
    const open = await env.startProxy({args: encArgs(['--semantic-guards', 'none'])});
    for (const [i, [a, b, guard]] of COUNTERFEITS.entries()) {
        const ns = space(`open${i}`);
        await store(open, a, ns);
        const r = await open.post(CHAT, chat(b), ns);
        assert.equal(r.headers['x-cache-status'], 'HIT', `${guard}: with semantic-guards none "${b}" hits`);
    }
    await open.stop();
});

/*
 * Look-alikes of the second hunt that the encoder puts above its threshold and that were
 * served: each is a miss now, counted by the guard that rejects it. [stored, asked, guard]
 */
const HUNTED_2 = [
    /* a word said twice in an idiom is one word replaced (0.93) */
    ['What is end-to-end encryption?', 'What is point-to-point encryption?', 'swap'],
    /* a French negation: ne... pas, and "du" becomes "de" (0.93) */
    ['Il y a du lait', "Il n'y a pas de lait", 'negation'],
    /* a script the encoder cannot read: any two Chinese, Japanese or Korean questions are one
     * vector (1.0): "why does my computer start" / "the weather in Beijing today" */
    ['\u4e3a\u4ec0\u4e48\u6211\u7684\u7535\u8111\u80fd\u5f00\u673a\uff1f',
        '\u5317\u4eac\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f', 'scripts'],
    ['\u5317\u4eac\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f',
        '\u4e0a\u6d77\u4eca\u5929\u5929\u6c14\u600e\u4e48\u6837\uff1f', 'scripts'],
    ['\u79c1\u306e\u30d1\u30bd\u30b3\u30f3\u304c\u8d77\u52d5\u3059\u308b\u7406\u7531',
        '\u79c1\u306e\u30d1\u30bd\u30b3\u30f3\u304c\u8d77\u52d5\u3057\u306a\u3044\u7406\u7531', 'scripts'],
    ['\uc624\ub298 \uc11c\uc6b8 \ub0a0\uc528 \uc5b4\ub54c\uc694?', '\uc624\ub298 \ubd80\uc0b0 \ub0a0\uc528 \uc5b4\ub54c\uc694?', 'scripts'],
];

h.test('look-alikes of the second hunt that the encoder puts above its threshold miss, counted by guard', async () => {
    const threshold = (await proxy.stats()).semantic_threshold;
    for (const [a, b, guard] of HUNTED_2) {
        const sim = await cosine(a, b);
        assert.ok(sim >= threshold, `${guard}: the encoder puts "${a}" / "${b}" at ${sim}, under ${threshold}`);
    }
    for (const [i, [a, b, guard]] of HUNTED_2.entries()) {
        const ns = space(`hunt${i}`);
        await store(proxy, a, ns);
        const st0 = await proxy.stats();
        const r = await proxy.post(CHAT, chat(b), ns);
        assertMiss(r);
        const key = `semantic_guard_rejects_${guard}`;
        assert.equal((await proxy.stats())[key], st0[key] + 1, `${key} for "${a}" / "${b}"`);
    }
    /* The same words again, spaced otherwise, are still one question (the Korean one). */
    const ns = space('hunt-same');
    const same = HUNTED_2[HUNTED_2.length - 1][0];
    await store(proxy, same, ns);
    assertSemanticHit(await proxy.post(CHAT, chat(same.replace(' ', '   ')), ns));
});

/*
 * Asks q with no-store until it is a semantic hit (a miss stores nothing, so
 * a later hit is by meaning, not an exact entry made on the way).
 */
function hitsAgain(p, q, ns) {
    return h.eventually(async () => assertSemanticHit(await p.post(CHAT, chat(q), {...ns, 'Cache-Control': 'no-store'})),
        {timeout: 30000, interval: 200});
}

h.test('an encoder that is stopped costs the semantic stage only', async () => {
    const [a, b] = PARAPHRASES[0];
    const ns = space('down');
    await store(proxy, a, ns);
    assertSemanticHit(await proxy.post(CHAT, chat(b), {...ns, 'Cache-Control': 'no-store'}));
    await enc.stop();
    const errors = (await proxy.stats()).semantic_embed_errors;

    /* A question never seen: answered by the upstream (and stored for exact hits). */
    const fresh = `What should I pack for a week in Iceland ${h.uniq('q')}?`;
    assertMiss(await proxy.post(CHAT, chat(fresh), ns));
    h.assertHit(await proxy.post(CHAT, chat(fresh), ns));
    /* The paraphrase cannot be embedded: a MISS answered by the upstream, not an error. */
    const calls = env.mock.callCount(CHAT);
    assertMiss(await proxy.post(CHAT, chat(b), {...ns, 'Cache-Control': 'no-store'}));
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'the upstream answered it');
    /* The exact stage is untouched. */
    h.assertHit(await proxy.post(CHAT, chat(a), ns));
    const st = await proxy.stats();
    assert.ok(st.semantic_embed_errors > errors, `semantic_embed_errors ${errors} -> ${st.semantic_embed_errors}`);

    await enc.restart(); /* the same port: the proxy's embedder-url is unchanged */
    await hitsAgain(proxy, b, ns);
});

h.test('an encoder that stalls holds no request past embedder-timeout', async () => {
    /* A short embedder-timeout: each lookup gives up on the stalled encoder quickly. */
    const p = await env.startProxy({args: encArgs(['--embedder-timeout', '1000'])});
    const [a, b] = PARAPHRASES[1];
    const ns = space('stall');
    await store(p, a, ns);
    enc.pause(); /* SIGSTOP: connections are accepted by the kernel and never answered */
    try {
        const fresh = `What should I pack for a weekend in Oslo ${h.uniq('q')}?`;
        const answers = await h.withDeadline(Promise.all([
            p.post(CHAT, chat(fresh), ns),
            p.post(CHAT, chat(b), {...ns, 'Cache-Control': 'no-store'}),
            p.post(CHAT, chat(`${b} Thanks`), {...ns, 'Cache-Control': 'no-store'}),
        ]), 20000, 'requests past a stalled encoder');
        for (const r of answers)
            assertMiss(r);
        h.assertHit(await p.post(CHAT, chat(fresh), ns));
        h.assertHit(await p.post(CHAT, chat(a), ns));
        const st = await p.stats();
        assert.ok(st.semantic_shed + st.semantic_embed_errors >= 1,
            `a lookup given up: semantic_shed ${st.semantic_shed}, semantic_embed_errors ${st.semantic_embed_errors}`);
    } finally {
        enc.resume();
    }
    await hitsAgain(p, b, ns);
    await p.stop();
});

h.test('tear down', async () => {
    await proxy.stop();
    await enc.stop();
});
