'use strict';
/*
 * Forged vector records and events (pc:2:v:{...} and pc:2:vs) in a real
 * redis-server: what another writer puts there is input. A partition is one
 * tenant's (its hash names the tenant), so a vector of another tenant found
 * in it can only be forged, and is never a candidate: a record copied under
 * tenant A's entry with tenant B's partition, announced on the stream, used
 * to serve A's stored answer to B's question. Within one tenant, a record of one partition
 * copied under the entry of another (another model, temperature, system prompt, tool set,
 * cache-key-headers value) served that entry too: the entry now names its own partition.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const A = {authorization: 'Bearer sk-tenant-a-forgery'};
const B = {authorization: 'Bearer sk-tenant-b-forgery'};

let sem = null;
let proxy = null;
let writer = null; /* another instance, whose writes reach proxy through the stream */

function semArgs(extra = []) {
    return ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9',
        ...extra];
}

const chat = (text) => h.chatBody(text);
const text = (r) => r.json.choices[0].message.content;

/* The one key matching pattern (waited for: the vector is written after the answer). */
async function oneKey(pattern) {
    return h.waitFor(async () => {
        const keys = await env.redis.keys(pattern);
        return keys.length === 1 ? keys[0] : null;
    }, {what: `one key ${pattern}`});
}

/*
 * After the forged event, another instance (writer) stores a question of the same partition:
 * its add event comes after the forged one, and the follower applies the stream in order, so
 * once p hits that question by meaning the forged event has been applied.
 */
async function forgedApplied(p, writer, headers) {
    const q = `how far can a kangaroo jump ${h.uniq('s').split(' ')[1]}`;
    assert.equal((await writer.post(CHAT, chat(q), headers)).headers['x-cache-status'], 'MISS');
    await h.eventually(async () => {
        const r = await p.post(CHAT, chat(`${q}?`), {...headers, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic', 'the writer\'s question, after the forged event');
    }, {timeout: 15000});
}

const tenantOf = (vkey) => /^pc:2:v:\{([0-9a-f]{16}):([0-9a-f]{64})\}$/.exec(vkey);

h.test('set up', async () => {
    sem = await createSemanticMock().listen();
    proxy = await env.startProxy({args: semArgs()});
    writer = await env.startProxy({args: semArgs()});
});

h.test('a forged record and event naming another tenant\'s entry never serve it to this tenant', async () => {
    const t = h.uniq('t').split(' ')[1];
    const secret = `the launch code of tenant a is ${t}`;
    const qb = `what is the capital of france ${t}`;
    const ra = await proxy.post(CHAT, chat(secret), A);
    assert.equal(ra.headers['x-cache-status'], 'MISS');
    const va = await oneKey('pc:2:v:*');
    const rb = await proxy.post(CHAT, chat(qb), B);
    assert.equal(rb.headers['x-cache-status'], 'MISS');
    await h.waitFor(async () => (await env.redis.keys('pc:2:v:*')).length === 2, {what: 'B\'s vector'});
    const vb = (await env.redis.keys('pc:2:v:*')).find((k) => k !== va);
    const [, ta, ka] = tenantOf(va);
    const [, tb, kb] = tenantOf(vb);
    assert.notEqual(ta, tb);
    /* B's partition is in memory (its own lookup loaded it): the forged add is applied. */
    await h.eventually(async () => {
        const r = await proxy.post(CHAT, chat(`${qb}?`), {...B, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic');
    });
    /* B's record (B's partition, B's vector and text) under A's entry, and its add event. */
    await env.redis.command('COPY', vb, va, 'REPLACE');
    await env.redis.command('EVAL', "return redis.call('XADD', KEYS[1], '*', 'op', 'add', 'k', ARGV[1], " +
        "'r', redis.call('GET', KEYS[2]), 'm', '1')", 2, 'pc:2:vs', va, `${ta}:${ka}`);
    /* B's own answer goes: A's entry would be the only candidate. */
    await env.redis.command('DEL', `pc:2:e:{${tb}:${kb}}`, vb);
    await forgedApplied(proxy, writer, B);
    for (let i = 0; i < 3; i++) {
        const r = await proxy.post(CHAT, chat(`${qb}!`), {...B, ...NO_STORE});
        assert.equal(r.status, 200, r.text);
        assert.doesNotMatch(text(r), /launch code/, `tenant B was served tenant A's answer (${r.headers['x-cache-match']})`);
        assert.equal(r.headers['x-cache-status'], 'MISS');
    }
    assert.ok((await proxy.stats()).semantic_sync_rejected >= 1, 'counted');
});

/*
 * An add event is only a hint: the vector that counts is the record's, which the fetch reads
 * anyway. An event naming a real entry with another question's vector (the record of another
 * entry of the partition) made the entry a candidate at similarity 1 for that other question;
 * with the guards off (or a pair they let through) its answer was served, with a similarity
 * above semantic-sure-threshold that also skips the verifier.
 */
h.test('an add event whose vector is not its record\'s never makes its entry a candidate', async () => {
    const t = h.uniq('t').split(' ')[1];
    const q1 = `how do I bake sourdough bread ${t}`;
    const q2 = `what is the capital city of france ${t}`;
    const loose = await env.startProxy({args: semArgs(['--semantic-guards', 'none'])});
    const before = new Set(await env.redis.keys('pc:2:v:*'));
    const fresh = async (n) => h.waitFor(async () => {
        const keys = (await env.redis.keys('pc:2:v:*')).filter((k) => !before.has(k));
        return keys.length === n ? keys : null;
    }, {what: `${n} new vector records`});
    assert.equal((await loose.post(CHAT, chat(q1), A)).headers['x-cache-status'], 'MISS');
    const [v1] = await fresh(1);
    assert.equal((await loose.post(CHAT, chat(q2), A)).headers['x-cache-status'], 'MISS');
    const v2 = (await fresh(2)).find((k) => k !== v1);
    const [, ta, k1] = tenantOf(v1);
    const [, , k2] = tenantOf(v2);
    await h.eventually(async () => {
        const r = await loose.post(CHAT, chat(`${q2}?`), {...A, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic');
    });
    /* q2's record (the same partition) announced as q1's entry's; q2's own answer goes. */
    await env.redis.command('EVAL', "return redis.call('XADD', KEYS[1], '*', 'op', 'add', 'k', ARGV[1], " +
        "'r', redis.call('GET', KEYS[2]), 'm', '1')", 2, 'pc:2:vs', v2, `${ta}:${k1}`);
    await env.redis.command('DEL', `pc:2:e:{${ta}:${k2}}`, v2);
    await forgedApplied(loose, proxy, A);
    for (let i = 0; i < 3; i++) {
        const r = await loose.post(CHAT, chat(`${q2}!`), {...A, ...NO_STORE});
        assert.equal(r.status, 200, r.text);
        assert.doesNotMatch(text(r), /sourdough/, `q1's answer served for q2 (${r.headers['x-cache-similarity']})`);
        assert.equal(r.headers['x-cache-status'], 'MISS');
    }
    /* q1 itself still hits by meaning: the index took its record's vector back. */
    await h.eventually(async () => {
        const r = await loose.post(CHAT, chat(`${q1}?`), {...A, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic');
        assert.match(text(r), /sourdough/);
    });
    await loose.stop();
});

/*
 * A partition is more than a tenant: the model, the parameters, the system prompt, the tools
 * and the cache-key-headers values. Within one tenant, a record of partition P2 copied under
 * the entry of another partition P1 (and announced on the stream) made P1's entry a candidate
 * for P2's questions, and its answer (another model's, another temperature's...) was served:
 * the fetch checked the record's partition, which the forger wrote, and the entry had none to
 * check. The entry now carries its partition, and a candidate whose entry is of another
 * partition (or says none) is never served.
 */
const ACROSS = [
    ['another model', {model: 'gpt-4o'}, {}],
    ['another temperature', {temperature: 1.3}, {}],
    ['another system prompt', {system: 'You are a pirate.'}, {}],
    ['other tools', {tools: [h.OPENAI_TOOL]}, {}],
    ['another cache-key-headers value', {}, {'openai-beta': 'assistants=v2'}],
];
for (const [what, extra, headers] of ACROSS) {
    h.test(`a forged record never serves an entry of ${what} (same tenant)`, async () => {
        const t = h.uniq('t').split(' ')[1];
        const secret = `the launch code of the other partition is ${t}`;
        const qb = `what is the capital city of france ${t}`;
        const body1 = extra.system !== undefined
            ? h.chatBody(secret, {messages: [{role: 'system', content: extra.system}, {role: 'user', content: secret}]})
            : h.chatBody(secret, extra);
        const before = new Set(await env.redis.keys('pc:2:v:*'));
        const fresh = async (n) => h.waitFor(async () => {
            const keys = (await env.redis.keys('pc:2:v:*')).filter((k) => !before.has(k));
            return keys.length === n ? keys : null;
        }, {what: `${n} new vector records`});
        const r1 = await proxy.post(CHAT, body1, {...A, ...headers});
        assert.equal(r1.headers['x-cache-status'], 'MISS', r1.text);
        const [v1] = await fresh(1);
        assert.equal((await proxy.post(CHAT, chat(qb), A)).headers['x-cache-status'], 'MISS');
        const v2 = (await fresh(2)).find((k) => k !== v1);
        const [, ta, k1] = tenantOf(v1);
        const [, t2, k2] = tenantOf(v2);
        assert.equal(ta, t2, 'one tenant');
        /* qb's partition is in memory (its own lookup loaded it): the forged add is applied. */
        await h.eventually(async () => {
            const r = await proxy.post(CHAT, chat(`${qb}?`), {...A, ...NO_STORE});
            assert.equal(r.headers['x-cache-match'], 'semantic');
        });
        /* qb's record (its partition, vector and text) under the other partition's entry. */
        await env.redis.command('COPY', v2, v1, 'REPLACE');
        await env.redis.command('EVAL', "return redis.call('XADD', KEYS[1], '*', 'op', 'add', 'k', ARGV[1], " +
            "'r', redis.call('GET', KEYS[2]), 'm', '1')", 2, 'pc:2:vs', v1, `${ta}:${k1}`);
        /* qb's own answer goes: the other partition's entry would be the only candidate. */
        await env.redis.command('DEL', `pc:2:e:{${ta}:${k2}}`, v2);
        await forgedApplied(proxy, writer, A);
        for (let i = 0; i < 3; i++) {
            const r = await proxy.post(CHAT, chat(`${qb}!`), {...A, ...NO_STORE});
            assert.equal(r.status, 200, r.text);
            assert.notEqual(r.json.id, r1.json.id,
                `an entry of ${what} was served (${r.headers['x-cache-match']} ${r.headers['x-cache-similarity']})`);
            assert.equal(r.headers['x-cache-status'], 'MISS');
        }
        /* The entry itself is untouched: its own partition still hits it exactly. */
        const again = await proxy.post(CHAT, body1, {...A, ...headers});
        assert.equal(again.headers['x-cache-match'], 'exact');
        assert.equal(again.json.id, r1.json.id);
    });
}

/* The entry at KEYS[1] as a version before the partition section wrote it (the section is
 * the last one: dropped, and the count with it, format 1 when it was alone). */
const STRIP_PARTITION = `
local v = redis.call('GET', KEYS[1])
local function num(at, n) local x = 0 for i = at + n - 1, at, -1 do x = x * 256 + string.byte(v, i) end return x end
local ctlen = num(46, 2)
local at = 52 + ctlen + num(48 + ctlen, 4)
local count = string.byte(v, at)
if string.byte(v, 4) ~= 2 or string.byte(v, #v - 36) ~= 6 or num(#v - 35, 4) ~= 32 then
  return redis.error_reply('no partition section last')
end
local old
if count == 1 then old = 'PCE' .. string.char(1) .. string.sub(v, 5, at - 1)
else old = string.sub(v, 1, at - 1) .. string.char(count - 1) .. string.sub(v, at + 1, #v - 37) end
redis.call('SET', KEYS[1], old, 'KEEPTTL')
return count`;

h.test('an entry stored without its partition (an older version) is an exact hit, never a semantic one', async () => {
    const t = h.uniq('t').split(' ')[1];
    const q = `which river flows through vienna ${t}`;
    const before = new Set(await env.redis.keys('pc:2:v:*'));
    const r1 = await proxy.post(CHAT, chat(q), A);
    assert.equal(r1.headers['x-cache-status'], 'MISS');
    const v = await h.waitFor(async () => {
        const keys = (await env.redis.keys('pc:2:v:*')).filter((k) => !before.has(k));
        return keys.length === 1 ? keys[0] : null;
    }, {what: 'the vector record'});
    const [, ta, k] = tenantOf(v);
    await h.eventually(async () => {
        const r = await proxy.post(CHAT, chat(`${q}?`), {...A, ...NO_STORE});
        assert.equal(r.headers['x-cache-match'], 'semantic');
    });
    assert.ok(await env.redis.command('EVAL', STRIP_PARTITION, 1, `pc:2:e:{${ta}:${k}}`) >= 1);
    const stale = (await proxy.stats()).semantic_stale;
    const r = await proxy.post(CHAT, chat(`${q}?`), {...A, ...NO_STORE});
    assert.equal(r.headers['x-cache-status'], 'MISS', 'no partition: not served by meaning');
    assert.notEqual(r.json.id, r1.json.id);
    assert.equal((await proxy.stats()).semantic_stale, stale + 1, 'dropped as unusable');
    /* An exact hit still: through another instance, whose L1 never held it. */
    const exact = await writer.post(CHAT, chat(q), A);
    assert.equal(exact.headers['x-cache-match'], 'exact');
    assert.equal(exact.json.id, r1.json.id);
});

h.test('tear down', async () => {
    if (sem)
        await sem.close();
});
