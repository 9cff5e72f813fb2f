'use strict';
/*
 * Semantic guards, through the real binary with the builtin embedder and its
 * default threshold: questions that differ only in a symbol (issue 20: an
 * operator, a sign, a path, code) or in a word's opposite must miss, each
 * rejection counted under the guard that made it; with that guard switched
 * off the same questions hit, which is what happened before it existed.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';

const tag = () => h.uniq('t').split(' ')[1];

/* [stored question, asked question, the guard that must reject the pair] */
const PAIRS = [
    ['What is 3+3?', 'What is 3*3?', 'symbols'],
    ['What is 5-2?', 'What is 5+2?', 'symbols'],
    ['Is -5 degrees Celsius cold?', 'Is 5 degrees Celsius cold?', 'numbers'],
    ['Is x > 5 in this loop?', 'Is x < 5 in this loop?', 'symbols'],
    ['Why is a != b true here?', 'Why is a == b true here?', 'symbols'],
    ['What is 2^10?', 'What is 2*10?', 'symbols'],
    ['What does rm -rf / do?', 'What does rm -rf ~ do?', 'symbols'],
    ['Does the regex ^a+$ match aaa?', 'Does the regex ^a*$ match aaa?', 'symbols'],
    ['Explain: if (a < b) return a;', 'Explain: if (a > b) return a;', 'symbols'],
    ['What is 1/2?', 'What is 2/1?', 'symbols'],
];

async function startBuiltin(guards) {
    const args = ['--semantic', 'yes', '--embedder', 'builtin'];
    for (const g of guards)
        args.push('--semantic-guards', g);
    const p = await env.startProxy({args});
    await h.waitFor(async () => (await p.stats()).semantic_sync_ready === true,
        {what: 'the vector index in step with Redis'});
    return p;
}

/* Store a, wait until its vector is indexed, then ask b: the response. */
async function askPair(p, a, b) {
    const ns = {'X-Cache-Namespace': `guards-${tag()}`};
    const before = (await p.stats()).semantic_vectors;
    const first = await p.post(CHAT, h.chatBody(a), ns);
    assert.equal(first.headers['x-cache-status'], 'MISS', a);
    await h.waitFor(async () => (await p.stats()).semantic_vectors > before,
        {what: `the vector of "${a}" in the index`});
    return p.post(CHAT, h.chatBody(b), ns);
}

h.test('symbol-only and sign-only rewrites miss with every guard on, counted by guard', async () => {
    const p = await startBuiltin([]);
    for (const [a, b, guard] of PAIRS) {
        const st0 = await p.stats();
        const r = await askPair(p, a, b);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-cache-status'], 'MISS', `"${a}" served for "${b}"`);
        const st = await p.stats();
        const key = `semantic_guard_rejects_${guard}`;
        assert.equal(st[key], st0[key] + 1, `${key} for "${a}" / "${b}"`);
        assert.equal(st.semantic_guard_rejects, st0.semantic_guard_rejects + 1);
    }
    const m = await p.get('/metrics');
    assert.match(m.text, /^promptcache_semantic_guard_rejects_symbols_total 9$/m);
    assert.match(m.text, /^promptcache_semantic_guard_rejects_numbers_total 1$/m);
    await p.stop();
});

h.test('without the symbols and numbers guards the same rewrites are served by meaning', async () => {
    const others = ['negation', 'entities', 'antonyms', 'dates', 'length', 'direction', 'question',
        'extra', 'swap'];
    const p = await startBuiltin(others);
    for (const [a, b] of PAIRS) {
        const r = await askPair(p, a, b);
        assert.equal(r.headers['x-cache-status'], 'HIT', `"${a}" / "${b}" (the case the guards exist for)`);
        assert.equal(r.headers['x-cache-match'], 'semantic');
    }
    await p.stop();
});
