'use strict';
/*
 * Wrong answers a hostile review got served by meaning (a semantic hit for a
 * question that means something else), through the real binary, a real
 * redis-server and the mock upstream: each pair here was a HIT before its fix
 * and must be a MISS now, counted where the fix counts it.
 *
 *   - the verifier was shown each text cut to 2000 bytes: a difference past
 *     that was invisible to it, and it said yes;
 *   - emoji carry meaning ("what does 🔥 mean" / "what does 💧 mean");
 *   - one tenant's verifications moved the error bound's prior of every
 *     tenant (semantic-max-error);
 *   - long texts that differ in one or two replaced words (a name, an object)
 *     are near 1 by any embedder;
 *   - accents: "año" / "ano", "papá" / "papa" when both texts use accents.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock, cosine} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';

let sem = null;

const tag = () => h.uniq('t').split(' ')[1];

function assertMiss(res, what) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-cache-status'], 'MISS', `${what}: X-Cache-Status (${res.headers['x-cache-match']})`);
}

function assertSemanticHit(res, what) {
    assert.equal(res.status, 200, res.text);
    assert.equal(res.headers['x-cache-status'], 'HIT', `${what}: X-Cache-Status`);
    assert.equal(res.headers['x-cache-match'], 'semantic', `${what}: X-Cache-Match`);
}

/*
 * Until text's own vector is in p's index: the same words with a trailing space (another
 * exact key, similarity 1), asked with no-store until they hit by meaning.
 */
function ownVector(p, text, headers) {
    return h.eventually(async () => {
        const r = await p.post(CHAT, h.chatBody(`${text} `), {...headers, 'Cache-Control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic',
            `the vector of "${text.slice(0, 40)}..." in the index (${r.headers['x-cache-status']})`);
    });
}

h.test('set up: mock embedder', async () => {
    sem = await createSemanticMock().listen();
});

h.test('the verifier sees both texts whole: a difference near the end of a long question is a miss', async () => {
    const verifier = createSemanticMock();
    await verifier.listen();
    /* Guards off: the verifier is the check under test; every pair below it is asked. */
    const p = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off',
        '--embedder', 'openai', '--embedder-url', sem.url, '--embedder-model', 'mock-bow',
        '--semantic-threshold', '0.5', '--semantic-guards', 'none',
        '--semantic-verify-url', verifier.url, '--semantic-verify-model', 'judge',
        '--semantic-sure-threshold', '1']});
    const t = tag();
    const ns = {'X-Cache-Namespace': t};
    /* A long question whose last part, past its first 2000 bytes, decides what it asks (a
     * bag of words puts a single word changed there at 0.99996, which rounds to 1: a few
     * dozen words change here). */
    let body = `Here is the full context of my question ${t}.`;
    while (body.length < 2100)
        body += ' The background explains the setup in some detail.';
    let red = '', blue = '';
    for (let i = 0; i < 30; i++) {
        red += ` red${i} apple`;
        blue += ` blue${i} pear`;
    }
    const cached = `${body} Now the part that decides:${red}`;
    const asked = `${body} Now the part that decides:${blue}`;
    assert.ok(Buffer.byteLength(cached) > 2300 && Buffer.byteLength(cached) < 4000);
    const sim = cosine(cached, asked);
    assert.ok(sim > 0.5 && sim < 0.99, `a grey-zone pair for the mock embedder (${sim})`);
    /* The verifier says yes only to two texts it sees equal (a model reading them closely), white
     * space at the ends aside: ownVector's rewording adds a space, and its similarity, rounded in
     * the index, may fall under the sure threshold of 1, so it may be asked about it. */
    const seen = [];
    verifier.verdict = (a, b) => {
        seen.push([a, b]);
        return a.trim() === b.trim() ? 'yes' : 'no';
    };
    assertMiss(await p.post(CHAT, h.chatBody(cached), ns), 'first ask');
    await ownVector(p, cached, ns);
    const calls = verifier.verifyCalls;
    assertMiss(await p.post(CHAT, h.chatBody(asked), {...ns, 'Cache-Control': 'no-store'}),
        'the red question served for the blue one');
    assert.equal(verifier.verifyCalls, calls + 1, 'the verifier was asked');
    const [a, b] = seen[seen.length - 1];
    assert.equal(a, asked, 'the asked text whole');
    assert.equal(b, cached, 'the cached text whole');
    const st = await p.stats();
    assert.equal(st.semantic_verify_rejects, 1);
    await p.stop();
    await verifier.close();
});

let builtin = null;

/*
 * Store a through the builtin-embedder proxy (every guard on), wait until its vector is
 * indexed, then ask b with a low threshold, so that only the guards can tell the two apart.
 */
async function askPair(a, b) {
    const ns = {'X-Cache-Namespace': `hostile-${tag()}`};
    assertMiss(await builtin.post(CHAT, h.chatBody(a), ns), a);
    await ownVector(builtin, a, ns);
    return builtin.post(CHAT, h.chatBody(b), {...ns, 'X-Cache-Threshold': '0.5', 'Cache-Control': 'no-store'});
}

/* b is a miss for a, rejected by guard (counted in /stats under its name). */
async function assertRejected(a, b, guard) {
    const key = `semantic_guard_rejects_${guard}`;
    const st0 = await builtin.stats();
    assertMiss(await askPair(a, b), `"${a}" served for "${b}"`);
    const st = await builtin.stats();
    assert.equal(st[key], st0[key] + 1, `${key} for "${a}" / "${b}"`);
    assert.equal(st.semantic_guard_rejects, st0.semantic_guard_rejects + 1);
}

h.test('set up: a proxy with the builtin embedder and every guard', async () => {
    builtin = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off',
        '--embedder', 'builtin']});
    await h.waitFor(async () => (await builtin.stats()).semantic_sync_ready === true,
        {what: 'the vector index in step with Redis'});
});

h.test('emoji carry meaning when both texts have some: another emoji is a miss', async () => {
    await assertRejected('what does \u{1F525} mean in a text', 'what does \u{1F4A7} mean in a text', 'symbols');
    await assertRejected('should I reply \u{1F44D} to my boss', 'should I reply \u{1F44E} to my boss', 'symbols');
    /* Decoration on one side only, or the same emoji repeated or moved, still hits. */
    assertSemanticHit(await askPair('\u{1F4F1} iPhone 15 price in Germany', 'iPhone 15 price in Germany'), 'one side');
    assertSemanticHit(await askPair('what does \u{1F525} mean in a text', '\u{1F525}\u{1F525} what does it mean in a text'),
        'the same emoji');
});

h.test('accents: where both texts use them, a word that differs by its accents alone is a miss', async () => {
    await assertRejected('¿Cuántos años tienes?', '¿Cuántos anos tienes?', 'accents');
    await assertRejected('¿Qué significa papá en México?', '¿Qué significa papa en México?', 'accents');
    /* Typed on a plain keyboard (no accent at all on one side): folded, a hit. */
    assertSemanticHit(await askPair('¿Qué significa papá en México?', 'que significa papa en mexico'), 'no accents');
    /* Case is no accent. */
    assertSemanticHit(await askPair('¿Qué significa papá?', '¿QUÉ SIGNIFICA PAPÁ?'), 'capitals');
});

h.test('a long text with one or two words replaced (an object, a name) is a miss unless they are synonyms', async () => {
    const long = (x, y, name) => `My colleague ${name} asked me yesterday about the quarterly budget report for the ` +
        `marketing department, and I need to explain why the ${x} expenses increased so much compared with ` +
        `the previous quarter, given that the team attended fewer conferences and the ${y} prices were lower ` +
        'overall this season. Please draft a short paragraph for the finance director that summarises the ' +
        'main reasons, suggests two concrete savings measures and stays polite.';
    await assertRejected(long('travel', 'hotel', 'Anna'), long('software', 'license', 'Anna'), 'replaced');
    await assertRejected(long('office', 'rent', 'Anna'), long('equipment', 'energy', 'Anna'), 'replaced');
    /* An inflection is no replacement. */
    assertSemanticHit(await askPair(long('travel', 'hotel', 'Anna'), long('travel', 'hotels', 'Anna')), 'a plural');
    assertSemanticHit(await askPair(long('travel', 'hotel', 'Anna'), long('travelling', 'hotel', 'Anna')), 'an inflection');
    /* Counted in /metrics like every guard (accents' two of the test before too). */
    const m = await builtin.get('/metrics');
    assert.match(m.text, /^promptcache_semantic_guard_rejects_replaced_total 2$/m);
    assert.match(m.text, /^promptcache_semantic_guard_rejects_accents_total 2$/m);
});

/* ---- the error bound's prior, per tenant ---- */

async function onDb(db, ...cmd) {
    const c = await env.redis.client();
    try {
        await c.command('SELECT', String(db));
        return await c.command(...cmd);
    } finally {
        c.close();
    }
}

/* A question, its rewording with the same words (similarity 1 for the mock embedder). */
const boundQuestion = (t) => `How do I reverse a list in Python ${t} ${t}b ${t}c?`;
const boundRewording = (t) => `in python ${t} ${t}b ${t}c, how do i REVERSE a list`;
const boundAsked = [];
/* A tag whose question is under 0.85 from every other one here (no unplanned candidate). */
function boundTag() {
    for (;;) {
        const t = tag();
        const q = boundQuestion(t);
        if (boundAsked.every((o) => cosine(q, o) < 0.85)) {
            boundAsked.push(q);
            return t;
        }
    }
}

h.test('one tenant\'s verifications never move another tenant\'s error bound', async () => {
    /*
     * With delta 0.3 the bound serves after 9 agreeing comparisons (semantic-bound.test.js).
     * Tenant A makes them; its prior then serves A. Tenant B, who has verified nothing, was
     * served on A's evidence too: the prior (pc:2:bg:...) was one for every tenant, so a
     * tenant that asked agreeing pairs loosened every other tenant's bound.
     */
    const db = 1;
    await onDb(db, 'FLUSHDB');
    const p = await env.startProxy({redis: env.redis.url.replace(/\/\d+$/, `/${db}`), workers: 1,
        args: ['--semantic', 'yes', '--embedder', 'openai', '--embedder-url', sem.url,
            '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9',
            '--semantic-max-error', '0.3', '--semantic-explore-rate', '0']});
    await p.waitReady();
    const A = {Authorization: 'Bearer sk-tenant-a'}, B = {Authorization: 'Bearer sk-tenant-b'};
    const ask = (text, meaning, who) => p.post(CHAT, h.chatBody(text), {'x-mock-meaning': meaning, ...who});
    for (let i = 0; i < 9; i++) {
        const t = boundTag();
        assertMiss(await ask(boundQuestion(t), `m-${t}`, A), 'A stores');
        const r = await ask(boundRewording(t), `m-${t}`, A);
        assertMiss(r, 'A is compared');
        assert.equal(r.headers['x-cache-verify'], 'agreed');
    }
    let t = boundTag();
    await ask(boundQuestion(t), `m-${t}`, A);
    assertSemanticHit(await ask(boundRewording(t), `m-${t}`, A), 'A, on its own evidence');
    const priorsA = await onDb(db, 'KEYS', 'pc:2:bg:*');
    assert.equal(priorsA.length, 1, `A's prior: ${priorsA}`);
    /* B: the same kind of pair, in its own partition, with no evidence of its own. */
    t = boundTag();
    await ask(boundQuestion(t), `m-${t}`, B);
    const b = await ask(boundRewording(t), `m-${t}`, B);
    assertMiss(b, 'B served on A\'s evidence');
    assert.equal(b.headers['x-cache-verify'], 'agreed', 'B\'s candidate was compared for B');
    const priors = await onDb(db, 'KEYS', 'pc:2:bg:*');
    assert.equal(priors.length, 2, `a prior per tenant: ${priors}`);
    /* B's prior read back is checked like any counts: a value not of the proxy's is rejected. */
    const priorB = priors.find((k) => k !== priorsA[0]);
    await onDb(db, 'SET', priorB, 'not the proxy\'s counts');
    const st0 = await p.stats();
    t = boundTag();
    await ask(boundQuestion(t), `m-${t}`, B);
    assertMiss(await ask(boundRewording(t), `m-${t}`, B), 'B with a forged prior');
    assert.equal((await p.stats()).semantic_bound_rejected, st0.semantic_bound_rejected + 1);
    await p.stop();
});

h.test('tear down', async () => {
    await builtin.stop();
    await sem.close();
});
