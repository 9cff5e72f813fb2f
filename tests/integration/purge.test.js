'use strict';
/*
 * Targeted invalidation, against a real Redis and two instances (A and B,
 * semantic cache on): every cacheable answer names its entry (X-Cache-Key);
 * DELETE /admin/cache/entries/ID removes that entry and its vector record,
 * and B's L1 and vector index drop it too (the pc:2:vs stream's del event);
 * DELETE /admin/cache?namespace=&model=&older-than=[&tenant=] removes exactly
 * the entries that match and says how many; `promptcache purge` does the
 * same from the command line.
 */
const assert = require('node:assert/strict');
const h = require('./lib');

const ADMIN_TOKEN = 'admin-token-for-purge';
const ARGS = ['--admin-token', ADMIN_TOKEN, '--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'hash'];
const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const ID = /^[0-9a-f]{80}$/;

let A = null;
let B = null;

function del(proxy, path, token = ADMIN_TOKEN) {
    const headers = token === null ? {} : {authorization: `Bearer ${token}`};
    return h.request(proxy.url, {method: 'DELETE', path, headers});
}

function question(label, extra = {}) {
    return h.chatBody(h.uniq(label), extra);
}

/* Store body (MISS through proxy) and return its X-Cache-Key. */
async function store(proxy, body, headers = {}) {
    const r = await proxy.post(CHAT, body, headers);
    h.assertFromUpstream(r, env.mock);
    assert.match(r.headers['x-cache-key'] || '', ID, 'a MISS names its entry');
    return r.headers['x-cache-key'];
}

/*
 * Once the vector record of the entry with this id is in Redis: a MISS's vector is written
 * after its answer was sent, so a flush right after the answer can come before it.
 */
async function vectorStored(id) {
    const key = `pc:2:v:{${id.slice(0, 16)}:${id.slice(16)}}`;
    await h.waitFor(async () => Number(await env.redis.command('EXISTS', key)) === 1,
        {what: `the vector record ${key}`});
}

async function assertGone(proxy, body, headers = {}) {
    const calls = env.mock.callCount(CHAT);
    h.assertFromUpstream(await proxy.post(CHAT, body, {...headers, 'cache-control': 'no-store'}),
        env.mock);
    assert.equal(env.mock.callCount(CHAT), calls + 1, 'the upstream answered');
}

async function assertKept(proxy, body, headers = {}) {
    h.assertHit(await proxy.post(CHAT, body, headers));
}

async function entryCount() {
    return (await env.redis.keys('pc:2:e:*')).length;
}

h.test('set up: two instances on one Redis', async () => {
    A = await env.startProxy({args: ARGS});
    B = await env.startProxy({args: ARGS});
    for (const p of [A, B])
        await h.waitFor(async () => {
            const s = await p.stats();
            return s.l1_live === true && s.semantic_sync_ready === true;
        }, {what: 'the L1 and the vector index following the stream'});
});

h.test('X-Cache-Key: the same id on the MISS, the exact HIT and a semantic HIT; none on BYPASS', async () => {
    const tag = h.uniq('t').split(' ')[1];
    const body = h.chatBody(`what is the tallest mountain on earth ${tag}`);
    const key = await store(A, body);
    const hit = await B.post(CHAT, body);
    h.assertHit(hit);
    assert.equal(hit.headers['x-cache-key'], key);
    await h.eventually(async () => {
        const r = await B.post(CHAT, h.chatBody(`what is the tallest mountain on earth ${tag}?`),
            {'cache-control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic');
        assert.equal(r.headers['x-cache-key'], key, 'the entry that answered');
    });
    const bypass = await A.post(CHAT, body, {'x-cache-mode': 'off'});
    assert.equal(bypass.headers['x-cache-status'], 'BYPASS');
    assert.equal(bypass.headers['x-cache-key'], undefined);
    const other = await A.post(CHAT, body, h.bearer('sk-purge-other-tenant'));
    assert.notEqual(other.headers['x-cache-key'], key, 'another tenant, another entry');
});

h.test('DELETE /admin/cache/entries/ID: gone from Redis, from B\'s L1 and from B\'s vector index', async () => {
    const tag = h.uniq('t').split(' ')[1];
    const body = h.chatBody(`how deep is the pacific ocean ${tag}`);
    const b0 = await B.stats();
    const key = await store(A, body);
    /*
     * Its own vector in B's index first: the reworded question hits by meaning with this
     * entry's key (no-store, so a miss stores nothing; a count of B's vectors is moved by any
     * other vector arriving late). A's "set" event, which drops every other instance's copy of
     * the key, goes on the stream before the vector's "add", so B has applied it by then: a read
     * by B before that would be dropped when the "set" arrives (as it must: B cannot tell
     * whether its read was older than A's write), and B's L1 would never hold the entry.
     */
    const reword = h.chatBody(`how deep is the pacific ocean ${tag}?`);
    await h.eventually(async () => {
        const r = await B.post(CHAT, reword, {'cache-control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic', r.headers['x-cache-status']);
        assert.equal(r.headers['x-cache-key'], key, 'the entry that answered');
    });
    /* Then B holds it in its L1 (read once from Redis). */
    h.assertHit(await B.post(CHAT, body));
    await h.waitFor(async () => (await B.stats()).l1_items > b0.l1_items, {what: 'the entry in B\'s L1'});
    const b1 = await B.stats();
    const gets = await getCalls();
    h.assertHit(await B.post(CHAT, body));
    assert.equal(await getCalls(), gets, 'B answers it from its L1');

    const tv = `${key.slice(0, 16)}:${key.slice(16)}`;
    assert.equal((await listsOf(tv)).length, 1, 'listed in its partition\'s member list');
    const r = await del(A, `/admin/cache/entries/${key}`);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, {deleted: 1});
    assert.deepEqual(await env.redis.keys(`pc:2:[ev]:{${tv}}`), [], 'entry and vector record gone');
    await h.waitFor(async () => (await listsOf(tv)).length === 0, {what: 'its member off the list'});
    await h.waitFor(async () => {
        const s = await B.stats();
        return s.l1_items < b1.l1_items && s.semantic_vectors < b1.semantic_vectors;
    }, {what: 'B\'s L1 and vector index to drop the entry'});
    await assertGone(B, body);
    /* nor does the meaning find it any more */
    const reworded = await B.post(CHAT, reword, {'cache-control': 'no-store'});
    assert.equal(reworded.headers['x-cache-status'], 'MISS');

    const again = await del(A, `/admin/cache/entries/${key}`);
    assert.deepEqual(again.json, {deleted: 0}, 'a second delete finds nothing');
});

/* The member lists (pc:2:pm:{tenant:...}) that list the entry id "tenant:key". */
async function listsOf(id) {
    const [tenant, key] = id.split(':');
    const out = [];
    for (const l of await env.redis.keys(`pc:2:pm:{${tenant}:*`))
        if (await env.redis.command('ZSCORE', l, key) !== null)
            out.push(l);
    return out;
}

async function getCalls() {
    const info = String(await env.redis.command('INFO', 'commandstats'));
    const m = /cmdstat_get:calls=(\d+)/.exec(info);
    return m ? Number(m[1]) : 0;
}

h.test('the admin endpoints need the token, and check what they are given', async () => {
    const body = question('purge auth');
    const key = await store(A, body);
    for (const path of [`/admin/cache/entries/${key}`, '/admin/cache?namespace=x'])
        assert.equal((await del(A, path, null)).status, 401, path);
    assert.equal((await del(A, '/admin/cache/entries/abc')).status, 400);
    assert.equal((await del(A, `/admin/cache/entries/${key}x`)).status, 400);
    /* one entry's delete takes no filters: a dry run asked for (or a filter that would not
     * match) deleted the entry all the same */
    for (const q of ['dry-run=1', 'model=other-model', 'namespace=x'])
        h.assertOpenAIError(await del(A, `/admin/cache/entries/${key}?${q}`), 400);
    for (const q of ['namespace=', 'namespace=a%20b', 'older-than=yesterday', 'older-than=5x',
        'modle=gpt', 'tenant=XYZ', 'older-than=2026-02-30T00:00:00Z', 'model=%zz',
        /* a filter given twice: every one given must match, so no entry could; the last one
         * alone deleted this entry, whose model is not other-model */
        `model=other-model&model=${body.model}`, 'namespace=a&namespace=b', 'older-than=2h&older-than=1d',
        'tenant=0123456789abcdef&tenant=0123456789abcdef'])
        assert.equal((await del(A, `/admin/cache?${q}`)).status, 400, q);
    const get = await h.request(A.url, {method: 'GET', path: `/admin/cache/entries/${key}`,
        headers: {authorization: `Bearer ${ADMIN_TOKEN}`}});
    assert.equal(get.status, 405);
    await assertKept(A, body);
});

h.test('?namespace= removes that namespace\'s entries, in every tenant, and nothing else', async () => {
    const ns1 = h.uniq('ns').replace(/\W/g, '-');
    const a = question('ns a');
    const b = question('ns b');
    const c = question('ns c');
    const d = question('ns d');
    const nsA = {'x-cache-namespace': ns1};
    const otherTenant = {...nsA, ...h.bearer('sk-purge-ns-other')};
    await store(A, a, nsA);
    await store(A, b, otherTenant);
    await store(A, c, {'x-cache-namespace': `${ns1}-other`});
    await store(A, d);
    const before = await entryCount();
    const r = await del(B, `/admin/cache?namespace=${ns1}`);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, {deleted: 2});
    assert.equal(await entryCount(), before - 2);
    /* Purged through B: A's L1 (which holds what A stored) drops them when B's del events
     * reach it on the stream, not at once (failed once under load: HIT). */
    await h.eventually(() => assertGone(A, a, nsA));
    await h.eventually(() => assertGone(A, b, otherTenant));
    await assertKept(A, c, {'x-cache-namespace': `${ns1}-other`});
    await assertKept(A, d);
});

h.test('?model= removes one model\'s answers; with &tenant= only that tenant\'s', async () => {
    const m1 = `model-${h.uniq('m').split(' ')[1]}`;
    const m2 = `${m1}-other`;
    const t1 = h.bearer('sk-purge-model-1');
    const t2 = h.bearer('sk-purge-model-2');
    const x = question('model x', {model: m1});
    const y = question('model y', {model: m1});
    const z = question('model z', {model: m2});
    await store(A, x, t1);
    await store(A, y, t2);
    const zKey = await store(A, z, t1);
    const tenant1 = zKey.slice(0, 16);
    const r = await del(A, `/admin/cache?model=${encodeURIComponent(m1)}&tenant=${tenant1}`);
    assert.deepEqual(r.json, {deleted: 1});
    await assertGone(A, x, t1);
    await assertKept(A, y, t2);
    await assertKept(A, z, t1);
    const all = await del(A, `/admin/cache?model=${encodeURIComponent(m1)}`);
    assert.deepEqual(all.json, {deleted: 1});
    await assertGone(A, y, t2);
    await assertKept(A, z, t1);
});

h.test('?older-than= removes the entries stored before a date (or a duration ago)', async () => {
    const t = h.bearer('sk-purge-age');
    const old1 = question('age old 1');
    const old2 = question('age old 2');
    await store(A, old1, t);
    const oldKey = await store(A, old2, t);
    /* stored at or before `stored` (ms); the cutoff a clock tick later, the young one after it */
    const stored = Date.now();
    await h.waitFor(async () => Date.now() > stored + 1, {what: 'the clock past the old entries'});
    const cutoff = Date.now();
    await h.waitFor(async () => Date.now() > cutoff + 1, {what: 'the clock past the cutoff'});
    const young = question('age young');
    await store(A, young, t);
    const tenant = oldKey.slice(0, 16);
    const none = await del(A, `/admin/cache?older-than=1h&tenant=${tenant}`);
    assert.deepEqual(none.json, {deleted: 0}, 'nothing is an hour old');
    const date = new Date(cutoff).toISOString(); /* 2026-12-04T17:00:00.123Z */
    const r = await del(A, `/admin/cache?older-than=${encodeURIComponent(date)}&tenant=${tenant}`);
    assert.deepEqual(r.json, {deleted: 2});
    await assertGone(A, old1, t);
    await assertGone(A, old2, t);
    await assertKept(A, young, t);
});

h.test('?older-than= of the epoch itself deletes nothing (it once read as no filter: a flush of everything)', async () => {
    const t = h.bearer('sk-purge-epoch');
    const body = question('epoch kept');
    const key = await store(A, body, t);
    const tenant = key.slice(0, 16);
    for (const when of ['1970-01-01', '1970-01-01T00:00:00Z', '1970-01-01T00:00:00.000Z',
        '1970-01-01T01:00:00+01:00']) {
        const r = await del(A, `/admin/cache?older-than=${encodeURIComponent(when)}`);
        assert.equal(r.status, 200, r.text);
        assert.deepEqual(r.json, {deleted: 0}, `older-than=${when}: no entry is older`);
        const mine = await del(A, `/admin/cache?older-than=${encodeURIComponent(when)}&tenant=${tenant}`);
        assert.deepEqual(mine.json, {deleted: 0}, `older-than=${when}&tenant=: no entry is older`);
        const cli = await purge(['--older-than', when]);
        assert.equal(cli.code, 0, cli.output);
        assert.match(cli.stdout, /^deleted 0 entries$/m, `purge --older-than ${when}`);
    }
    await assertKept(A, body, t);
});

h.test('a value that does not read as an entry is left alone and counted', async () => {
    const key = `pc:2:e:{${'0'.repeat(16)}:${'0'.repeat(64)}}`;
    await env.redis.command('SET', key, 'not an entry');
    const s0 = await A.stats();
    const r = await del(A, '/admin/cache?namespace=anything');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, {deleted: 0});
    assert.deepEqual(await env.redis.keys(key.replace(/[{}]/g, '\\$&')), [key]);
    assert.ok((await A.stats()).cache_corrupt > s0.cache_corrupt, 'counted in cache_corrupt');
    await env.redis.command('DEL', key);
});

/*
 * Another writer's key of another type under the entry prefix (a hash, a
 * list): the pick script's GETRANGE on it is a WRONGTYPE error, which failed
 * the whole EVAL, so every targeted delete answered 503 and deleted nothing
 * past it, from the API and the command line alike.
 */
h.test('a key of another type among the entries is left alone and counted; the delete goes on', async () => {
    const ns = h.uniq('wrongtype').replace(/\W/g, '-');
    const hdr = {'x-cache-namespace': ns};
    const body = question('wrong type');
    await store(A, body, hdr);
    const tenant = 'feedfacefeedfac0';
    const hash = `pc:2:e:{${tenant}:${'3'.repeat(64)}}`;
    const list = `pc:2:e:{${tenant}:${'4'.repeat(64)}}`;
    await env.redis.command('HSET', hash, 'not', 'an entry');
    await env.redis.command('RPUSH', list, 'not an entry');
    try {
        const s0 = await A.stats();
        const r = await del(A, `/admin/cache?namespace=${ns}`);
        assert.equal(r.status, 200, r.text);
        assert.deepEqual(r.json, {deleted: 1});
        await assertGone(A, body, hdr);
        assert.ok((await A.stats()).cache_corrupt >= s0.cache_corrupt + 2, 'counted in cache_corrupt');
        await store(A, body, hdr);
        const cli = await purge(['--namespace', ns]);
        assert.equal(cli.code, 0, cli.output);
        assert.match(cli.stdout, /^deleted 1 entry$/m);
        assert.match(cli.stdout, /left alone: 2 values that did not read as an entry/);
        assert.deepEqual((await env.redis.keys(`pc:2:e:{${tenant}:*`)).sort(), [hash, list].sort());
    } finally {
        await env.redis.command('DEL', hash, list);
    }
});

/*
 * Entries written before namespace and model were kept: the fuzz seeds are
 * real encoded entries, one without the section (format 1) and the same with
 * it, stored as they are under two keys of one tenant.
 */
h.test('an entry stored before namespace and model were kept goes by age, not by model', async () => {
    const fs = require('node:fs');
    const {spawnSync} = require('node:child_process');
    const seed = (name) => fs.readFileSync(require('node:path').join(h.REPO, 'tests', 'fuzz',
        'corpus', 'entry', name));
    const tenant = 'feedfacefeedface';
    const keys = ['1'.repeat(64), '2'.repeat(64)].map((k) => `pc:2:e:{${tenant}:${k}}`);
    [seed('chat_json'), seed('chat_json_meta')].forEach((value, i) => {
        const r = spawnSync('redis-cli', ['-p', String(env.redis.port), '-x', 'SET', keys[i]],
            {input: value});
        assert.equal(r.status, 0, String(r.stderr));
    });
    const byModel = await del(A, `/admin/cache?model=gpt-4o-mini&tenant=${tenant}`);
    assert.deepEqual(byModel.json, {deleted: 1}, 'only the entry that knows its model');
    assert.equal((await env.redis.keys(`pc:2:e:{${tenant}:*`)).length, 1);
    const byNs = await del(A, `/admin/cache?namespace=docs&tenant=${tenant}`);
    assert.deepEqual(byNs.json, {deleted: 0});
    /* stored on 2025-12-02 (the seed's created_ms) */
    const byAge = await del(A, `/admin/cache?older-than=2025-12-03&tenant=${tenant}`);
    assert.deepEqual(byAge.json, {deleted: 1});
    assert.deepEqual(await env.redis.keys(`pc:2:e:{${tenant}:*`), []);
});

function purge(args) {
    return h.runCli(['purge', '--redis', env.redis.url, ...args]);
}

h.test('promptcache purge: the same operations from the command line', async () => {
    const ns = h.uniq('cli').replace(/\W/g, '-');
    const hdr = {'x-cache-namespace': ns};
    const p = question('cli p');
    const q = question('cli q');
    await store(A, p, hdr);
    const qKey = await store(A, q);
    const before = await entryCount();

    const dry = await purge(['--namespace', ns, '--dry-run']);
    assert.equal(dry.code, 0, dry.output);
    assert.match(dry.stdout, /would delete 1 entry/);
    assert.equal(await entryCount(), before, 'a dry run deletes nothing');

    const real = await purge(['--namespace', ns]);
    assert.equal(real.code, 0, real.output);
    assert.match(real.stdout, /^deleted 1 entry$/m);
    /* The command line is no instance: A's L1 drops p when the del event reaches it. */
    await h.eventually(() => assertGone(A, p, hdr));

    /*
     * --key: B's L1 drops it too (the del event). First B reads q into its L1, once A's "set"
     * event for q has reached B: a read made before is dropped by that event, also after the
     * L1 grew by it, and then the del below had nothing to drop (the test passed whether or
     * not the del reached B's L1). q's own vector in B's index first, as in the test of one
     * entry: the reworded question hits by meaning with q's key (no-store: a miss stores
     * nothing), and the vector's "add" follows A's "set" on the stream.
     */
    const qReword = h.chatBody(`${q.messages[1].content}?`);
    await h.eventually(async () => {
        const r = await B.post(CHAT, qReword, {'cache-control': 'no-store'});
        assert.equal(r.headers['x-cache-match'], 'semantic', r.headers['x-cache-status']);
        assert.equal(r.headers['x-cache-key'], qKey, 'the entry that answered');
    });
    const b0 = await B.stats();
    await h.waitFor(async () => {
        h.assertHit(await B.post(CHAT, q));
        return (await B.stats()).l1_items > b0.l1_items;
    }, {what: 'q in B\'s L1'});
    const qId = `${qKey.slice(0, 16)}:${qKey.slice(16)}`;
    assert.equal((await listsOf(qId)).length, 1, 'q listed in its partition\'s member list');
    const one = await purge(['--key', qKey]);
    assert.equal(one.code, 0, one.output);
    assert.match(one.stdout, /^deleted 1 entry$/m);
    assert.deepEqual(await listsOf(qId), [], 'its member off the list');
    /* B read the del event when q is no longer in its L1: asked with no-store until the upstream
     * answers (a count of events read is moved by the earlier writes' events arriving late). */
    await h.eventually(() => assertGone(B, q));

    const bad = await purge(['--older-than', 'soon']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /--older-than must be an RFC 3339 date/);
    const nothing = await purge([]);
    assert.equal(nothing.code, 2);
    assert.match(nothing.stderr, /say what to delete/);
    const both = await purge(['--all', '--model', 'm']);
    assert.equal(both.code, 2);
    const twice = await purge(['--model', 'other-model', '--model', q.model, '--dry-run']);
    assert.equal(twice.code, 2, twice.output);
    assert.match(twice.stderr, /--model given twice/);
    const keys = await purge(['--key', qKey, '--key', `${qKey.slice(0, -1)}0`, '--dry-run']);
    assert.equal(keys.code, 2, keys.output);
    assert.match(keys.stderr, /--key given twice/);
    /* An id that is none is a usage error like a bad filter (2), said before Redis is asked:
     * it was exit 1, and with Redis away the message was the connection's. */
    const notId = await purge(['--key', `${qKey.slice(0, -1)}g`]);
    assert.equal(notId.code, 2, notId.output);
    assert.match(notId.stderr, /--key must be an entry id/);
    const away = await h.runCli(['purge', '--redis', 'redis://127.0.0.1:1/0', '--key', 'not-an-id']);
    assert.equal(away.code, 2, away.output);
    assert.match(away.stderr, /--key must be an entry id/);
});

/* The error bound's marks of the entry with this id (pc_bound.h), as a comparison leaves them. */
const marksKey = (id) => `pc:2:o:{${id.slice(0, 16)}:${id.slice(16)}}`;
async function mark(id) {
    await env.redis.command('SETBIT', marksKey(id), '99', '1');
    await env.redis.command('PEXPIRE', marksKey(id), '600000');
}
const marked = async (id) => Number(await env.redis.command('EXISTS', marksKey(id))) === 1;

h.test('every targeted purge deletes the error bound\'s marks of the entries it deletes, and only theirs', async () => {
    const ns = h.uniq('marks').replace(/\W/g, '-');
    const hdr = {'x-cache-namespace': ns};
    const byNs = await store(A, question('marks ns'), hdr);
    const kept = await store(A, question('marks kept'));
    const byId = await store(A, question('marks id'));
    const cliNs = `${ns}-cli`;
    const byCliNs = await store(A, question('marks cli ns'), {'x-cache-namespace': cliNs});
    const byCliKey = await store(A, question('marks cli key'));
    const t = h.bearer('sk-purge-marks-tenant');
    const byTenant = await store(A, question('marks tenant'), t);
    for (const id of [byNs, kept, byId, byCliNs, byCliKey, byTenant])
        await mark(id);
    let r = await del(B, `/admin/cache?namespace=${ns}`);
    assert.deepEqual(r.json, {deleted: 1});
    assert.equal(await marked(byNs), false, 'DELETE /admin/cache?namespace=: its marks');
    r = await del(B, `/admin/cache/entries/${byId}`);
    assert.equal(r.status, 200, r.text);
    assert.equal(await marked(byId), false, 'DELETE /admin/cache/entries/ID: its marks');
    let c = await purge(['--namespace', cliNs]);
    assert.equal(c.code, 0, c.output);
    assert.equal(await marked(byCliNs), false, 'purge --namespace: its marks');
    c = await purge(['--key', byCliKey]);
    assert.equal(c.code, 0, c.output);
    assert.equal(await marked(byCliKey), false, 'purge --key: its marks');
    c = await purge(['--tenant', byTenant.slice(0, 16)]);
    assert.equal(c.code, 0, c.output);
    assert.equal(await marked(byTenant), false, 'purge --tenant: its marks');
    assert.equal(await marked(kept), true, 'an entry not deleted keeps its marks');
});

h.test('promptcache purge --tenant and --all flush, and tell every L1', async () => {
    const t = h.bearer('sk-purge-cli-tenant');
    const key = await store(A, question('cli tenant'), t);
    const other = await store(A, question('cli other'));
    /* both vectors written (after their answers) before the flushes that must delete them */
    await vectorStored(key);
    await vectorStored(other);
    const dry = await purge(['--tenant', key.slice(0, 16), '--dry-run']);
    assert.match(dry.stdout, /would delete 1 entry/);
    const r = await purge(['--tenant', key.slice(0, 16)]);
    assert.match(r.stdout, /^deleted 1 entry$/m);
    assert.ok((await entryCount()) > 0, 'other tenants\' entries stay');
    const all = await purge(['--all']);
    assert.equal(all.code, 0, all.output);
    assert.equal(await entryCount(), 0);
    assert.deepEqual(await env.redis.keys('pc:2:v:*'), [], 'vector records too');
    assert.deepEqual(await env.redis.keys('pc:2:o:*'), [], 'and the error bound\'s marks');
});

h.test('promptcache purge against a Redis that never answers says it timed out (redis-timeout, not 60 s a reply)', async () => {
    const net = require('node:net');
    /* Accepts and reads, never answers. */
    const silent = net.createServer((c) => c.on('error', () => {}));
    await new Promise((resolve) => silent.listen(0, '127.0.0.1', resolve));
    try {
        for (const args of [['--all'], ['--namespace', 'ns', '--dry-run'], ['--all', '--redis-timeout', '200']]) {
            /* runCli gives up after 20 s: a purge that waited 60 s per reply fails here */
            const r = await h.runCli(['purge', '--redis', `redis://127.0.0.1:${silent.address().port}/0`, ...args]);
            assert.notEqual(r.code, 0, r.output);
            assert.match(r.stderr, /promptcache purge: .*timed out \(no reply in time\)/, `${args.join(' ')}:\n${r.output}`);
        }
    } finally {
        silent.close();
    }
});

/*
 * body stored through `via` (headers: its namespace or credential) and read into D's L1 (a read
 * before via's set event would be dropped): its key and its entry's Redis key.
 */
async function storedInL1(via, D, body, headers) {
    const key = await store(via, body, headers);
    await h.waitFor(async () => {
        h.assertHit(await D.post(CHAT, body, headers));
        return (await D.stats()).l1_items === 1;
    }, {what: 'the entry in D\'s L1'});
    return {key, ekey: `pc:2:e:{${key.slice(0, 16)}:${key.slice(16)}}`};
}

h.test('a purge whose client hangs up still tells every instance what it deleted', async () => {
    const holder = await h.startRelay(env.redis.port);
    const C = await env.startProxy({redis: holder.url, workers: 1, args: ['--admin-token', ADMIN_TOKEN]});
    const D = await env.startProxy({workers: 1});
    try {
        const ns = h.uniq('hangup').replace(/\W/g, '-');
        const body = question('hang up');
        const {ekey} = await storedInL1(C, D, body, {'x-cache-namespace': ns});
        const baseline = (await C.stats()).connections_active;
        holder.armReplies('promptcache purge: pick');
        const sock = require('node:net').connect(Number(new URL(C.url).port), '127.0.0.1');
        sock.on('error', () => {});
        sock.write(`DELETE /admin/cache?namespace=${ns} HTTP/1.1\r\nHost: x\r\n` +
            `Authorization: Bearer ${ADMIN_TOKEN}\r\n\r\n`);
        await h.waitFor(async () => holder.holding() === 1 &&
            Number(await env.redis.command('EXISTS', ekey)) === 0, {what: 'the pick run, its reply held'});
        sock.destroy(); /* the admin leaves while the answer of Redis is on its way */
        await h.waitFor(async () => (await C.stats()).connections_active === baseline,
            {what: 'C to see the client gone'});
        holder.release();
        await h.waitFor(async () => (await D.stats()).l1_items === 0,
            {what: 'D\'s L1 to drop the deleted entry (its del event)'});
        await assertGone(D, body, {'x-cache-namespace': ns});
    } finally {
        holder.release();
        await C.stop();
        await D.stop();
        await holder.close();
    }
});

h.test('a flush whose client hangs up still runs to its end and tells every instance', async () => {
    const holder = await h.startRelay(env.redis.port);
    const C = await env.startProxy({redis: holder.url, workers: 1, args: ['--admin-token', ADMIN_TOKEN]});
    const D = await env.startProxy({workers: 1});
    try {
        const t = h.bearer('sk-purge-flush-hang-up');
        const body = question('flush hang up');
        const {key} = await storedInL1(C, D, body, t);
        const tenant = key.slice(0, 16);
        const baseline = (await C.stats()).connections_active;
        holder.armReplies('UNLINK');
        const sock = require('node:net').connect(Number(new URL(C.url).port), '127.0.0.1');
        sock.on('error', () => {});
        sock.write(`DELETE /admin/cache?tenant=${tenant} HTTP/1.1\r\nHost: x\r\n` +
            `Authorization: Bearer ${ADMIN_TOKEN}\r\n\r\n`);
        await h.waitFor(async () => holder.holding() === 1 &&
            (await env.redis.keys(`pc:2:e:{${tenant}:*`)).length === 0, {what: 'the UNLINK run, its reply held'});
        sock.destroy();
        await h.waitFor(async () => (await C.stats()).connections_active === baseline,
            {what: 'C to see the client gone'});
        holder.release();
        await h.waitFor(async () => (await D.stats()).l1_items === 0,
            {what: 'D\'s L1 to drop the flushed entry (the flush event)'});
        await assertGone(D, body, t);
        await assertGone(C, body, t);
    } finally {
        holder.release();
        await C.stop();
        await D.stop();
        await holder.close();
    }
});

h.test('a purge whose pick reply timed out tells every instance what it deleted before it says it failed', async () => {
    /*
     * C waits 1 s (20 x 50 ms) for a pick step's reply: the holder keeps it, the script has run
     * (the entry is gone from Redis), C gives up and its connection is dropped. D holds the
     * entry in its L1, and only a del event makes it let go: C publishes it from the entry's
     * owed mark once Redis answers again, before its 503.
     */
    const holder = await h.startRelay(env.redis.port);
    const C = await env.startProxy({redis: holder.url, workers: 1,
        args: ['--admin-token', ADMIN_TOKEN, '--redis-timeout', '50']});
    const D = await env.startProxy({workers: 1});
    try {
        const ns = h.uniq('timeout').replace(/\W/g, '-');
        const body = question('pick timed out');
        const {ekey} = await storedInL1(C, D, body, {'x-cache-namespace': ns});
        holder.armReplies('promptcache purge: pick');
        const first = await del(C, `/admin/cache?namespace=${ns}`);
        assert.equal(first.status, 503, first.text);
        assert.match(first.json.error.message, /run it again/, 'the way out is said');
        assert.equal(Number(await env.redis.command('EXISTS', ekey)), 0, 'the script deleted it');
        assert.deepEqual(await env.redis.keys('pc:2:pd:*'), [], 'its del event published, its mark gone');
        await h.waitFor(async () => (await D.stats()).l1_items === 0,
            {what: 'D\'s L1 to drop the purged entry (its del event)'});
        await assertGone(D, body, {'x-cache-namespace': ns});
        holder.release(); /* too late: C let go of that reply */
        const again = await h.eventually(async () => {
            const r = await del(C, `/admin/cache?namespace=${ns}`);
            assert.equal(r.status, 200, r.text);
            return r;
        });
        assert.deepEqual(again.json, {deleted: 0}, 'nothing left to delete');
    } finally {
        holder.release();
        await C.stop();
        await D.stop();
        await holder.close();
    }
});

h.test('promptcache purge whose pick reply timed out tells every instance before it fails; marks left go with the next', async () => {
    const holder = await h.startRelay(env.redis.port);
    const D = await env.startProxy({workers: 1});
    try {
        const ns = h.uniq('cli-timeout').replace(/\W/g, '-');
        const body = question('cli pick timed out');
        const {ekey} = await storedInL1(D, D, body, {'x-cache-namespace': ns});
        holder.armReplies('promptcache purge: pick');
        const first = await h.runCli(['purge', '--redis', holder.url, '--redis-timeout', '1000',
            '--namespace', ns]);
        assert.equal(first.code, 1, first.output);
        assert.match(first.stderr, /timed out/);
        assert.match(first.stdout, /^published the del events of 1 entry this purge deleted before it failed$/m);
        assert.equal(Number(await env.redis.command('EXISTS', ekey)), 0, 'the script deleted it');
        assert.deepEqual(await env.redis.keys('pc:2:pd:*'), [], 'its event published, its mark gone');
        await h.waitFor(async () => (await D.stats()).l1_items === 0,
            {what: 'D\'s L1 to drop the purged entry (its del event)'});
        await assertGone(D, body, {'x-cache-namespace': ns});
        holder.release();

        /* A mark left (Redis did not answer again in time): the next targeted purge publishes it. */
        const mark = `pc:2:pd:{${'c'.repeat(16)}:${'d'.repeat(64)}}`;
        await env.redis.command('SET', mark, '1', 'PX', '600000');
        const again = await h.runCli(['purge', '--redis', env.redis.url, '--namespace', ns]);
        assert.equal(again.code, 0, again.output);
        assert.match(again.stdout, /^published the del events of 1 entry an earlier purge deleted/m);
        assert.match(again.stdout, /^deleted 0 entries$/m);
        assert.deepEqual(await env.redis.keys('pc:2:pd:*'), [], 'nothing owed any more');
    } finally {
        holder.release();
        await D.stop();
        await holder.close();
    }
});
