'use strict';
/*
 * The L1 of instances on a Redis Cluster. An answer's SET goes to the primary
 * of its key and the op=set event that makes every other instance drop its L1
 * copy goes to the primary of the stream: two nodes, two connections, no
 * order between them. An event that reached the stream before its SET reached
 * the entry's node told the other instances too early: one that read the old
 * answer after applying the event put it into its L1, and served it after the
 * refresh had landed, for the rest of the old answer's TTL (an L1 item whose
 * key holds an answer of the same length is never found out by its check).
 *
 * A primary that holds writes back (CLIENT PAUSE WRITE, which a failover
 * issues) keeps the SET away as long as the test needs.
 */
const assert = require('node:assert/strict');
const h = require('./lib');
const {startCluster, keySlot} = require('./lib/cluster');

const env = h.environment({redis: false, proxy: false});
const CHAT = '/v1/chat/completions';
const STREAM = 'pc:2:vs';
const EXACT = {'x-cache-mode': 'exact'};

let cluster = null;

async function startOne(extra = []) {
    const p = await env.startProxy({redis: cluster.url(), workers: 1, waitReady: false,
        args: ['--semantic', 'yes', '--embedder', 'hash', '--semantic-max-error', 'off', ...extra]});
    await p.waitReady();
    await h.waitFor(async () => (await p.stats()).l1_live === true, {what: 'l1_live', timeout: 15000});
    return p;
}

/* The Redis key of an answer's X-Cache-Key (16 hex of tenant, 64 of exact key). */
const entryKey = (id) => `pc:2:e:{${id.slice(0, 16)}:${id.slice(16)}}`;

/* The L1 events (set, del, flush) on the stream after id, and how many are set events of key. */
async function eventsAfter(port, id, key) {
    const list = await cluster.command(port, 'XRANGE', STREAM, `(${id}`, '+');
    let l1 = 0, sets = 0;
    for (const [, fields] of list) {
        const f = {};
        for (let i = 0; i + 1 < fields.length; i += 2)
            f[fields[i]] = fields[i + 1];
        if (['set', 'del', 'flush'].includes(f.op))
            l1++;
        if (f.op === 'set' && `pc:2:e:{${f.k}}` === key)
            sets++;
    }
    return {l1, sets};
}

async function lastId(port) {
    const info = await cluster.command(port, 'XINFO', 'STREAM', STREAM);
    return info[info.indexOf('last-generated-id') + 1];
}

/*
 * acked: the writer stores a vector with the answer (the semantic cache on), so no del event
 * follows its SET; timed out: its SET is answered after redis-timeout, so nothing follows it
 * (the answer is relayed, the SET lands when the primary takes writes again).
 */
for (const mode of ['acked', 'timed out']) {
    h.test(`a refresh on another instance (its SET ${mode}): the old answer does not stay in an L1 ` +
        'while its primary held the SET back', {timeout: 120000}, async () => {
        cluster = await startCluster({primaries: 3, replicas: 0});
        try {
            const reader = await startOne();
            /* The writer waits for its held SET as long as the test holds it, or 4 s. */
            const writer = await startOne(['--redis-timeout', mode === 'acked' ? '60000' : '4000']);
            const streamNode = (await cluster.ownerOf(STREAM)).port;
            /* An answer whose entry lives on another primary than the stream. */
            let body = null, key = null, old = null;
            for (let i = 0; i < 30 && key === null; i++) {
                const b = h.chatBody(h.uniq('cluster l1 refresh'));
                const r = await writer.post(CHAT, b);
                h.assertFromUpstream(r, env.mock);
                const k = entryKey(r.headers['x-cache-key']);
                if ((await cluster.ownerOf(k)).port !== streamNode)
                    [body, key, old] = [b, k, r];
            }
            assert.ok(key, 'an entry on another primary than the stream');
            const entryNode = (await cluster.ownerOf(key)).port;
            const events0 = (await reader.stats()).l1_events;
            const skipped0 = (await writer.stats()).cache_store_skipped;
            const base = await lastId(streamNode);
            /* Every L1 event on the stream so far applied by the reader, and at least `sets` set
             * events of key among them. */
            const applied = (sets) => h.waitFor(async () => {
                const ev = await eventsAfter(streamNode, base, key);
                return ev.sets >= sets && (await reader.stats()).l1_events - events0 >= ev.l1;
            }, {what: 'the reader to apply the stream\'s events', timeout: 20000});

            await cluster.command(entryNode, 'CLIENT', 'PAUSE', '60000', 'WRITE');
            let refresh, fresh;
            try {
                refresh = writer.post(CHAT, body, {'cache-control': 'no-cache'});
                /* The refresh's SET is held at the entry's primary. */
                await h.waitFor(async () => /flags=b\b.*cmd=set\b/.test(
                    String(await cluster.command(entryNode, 'CLIENT', 'LIST'))), {what: 'the SET held'});
                await applied(0);
                /* Redis still holds the old answer: the reader serves it, into its L1. */
                const r = await reader.post(CHAT, body, {...EXACT, 'cache-control': 'no-store'});
                h.assertHit(r);
                assert.equal(h.chatText(r.json), h.chatText(old.json));
                await h.waitFor(async () => {
                    const hits = (await reader.stats()).l1_hits;
                    await reader.post(CHAT, body, {...EXACT, 'cache-control': 'no-store'});
                    return (await reader.stats()).l1_hits > hits;
                }, {what: 'the old answer in the reader\'s L1'});
                if (mode === 'timed out') {
                    fresh = await refresh;
                    assert.equal((await writer.stats()).cache_store_skipped, skipped0 + 1, 'the SET timed out');
                }
            } finally {
                await cluster.command(entryNode, 'CLIENT', 'UNPAUSE');
            }
            fresh = fresh || await refresh;
            h.assertFromUpstream(fresh, env.mock, 'REFRESH');
            assert.notEqual(h.chatText(fresh.json), h.chatText(old.json));
            await h.waitFor(async () => String(await cluster.command(entryNode, 'GET', key))
                .includes(h.chatText(fresh.json)), {what: 'Redis to hold the refreshed answer'});
            await applied(1);
            const after = await reader.post(CHAT, body, {...EXACT, 'cache-control': 'no-store'});
            assert.equal(after.status, 200, after.text);
            assert.equal(h.chatText(after.json), h.chatText(fresh.json),
                `the refreshed answer, not the old one (${after.headers['x-cache-status']})`);
        } finally {
            await Promise.all(env.proxies.splice(0).map((p) => p.stop(5000)));
            await cluster.stop();
        }
    });
}
