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
 * issues) keeps the SET away as long as the test needs. The event waits for
 * an answer to a command sent behind the SET; that command timing out while
 * the connection lives on (lookups keep it busy) is no answer.
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

/*
 * The vector member lists' one-time build (the first instance's, at start) is over: it writes
 * on every primary, and a write of it held by a pause would be another held SET.
 */
async function listsBuilt() {
    const mark = 'pc:2:pm-ready';
    await h.waitFor(async () => String(await cluster.command((await cluster.ownerOf(mark)).port,
        'GET', mark)) === '1', {what: 'the member lists built', timeout: 20000});
}

/* The id of the client whose SET the node at port holds back (CLIENT PAUSE WRITE), or null. */
async function heldSet(port) {
    const list = String(await cluster.command(port, 'CLIENT', 'LIST')).split('\n');
    const line = list.find((l) => /flags=b\b.*cmd=set\b/.test(l));
    return line ? /\bid=(\d+)/.exec(line)[1] : null;
}

/*
 * n bodies for each primary but the stream's, whose keys live there: looked up (misses, not
 * stored), they keep the proxy's connection to that node busy while it holds writes back
 * (Redis takes the bytes of a client whose SET it holds: the stall watch sees it alive).
 */
async function busyBodies(proxy, streamNode, n) {
    const on = {};
    for (const {port} of await cluster.primaries())
        if (port !== streamNode)
            on[port] = [];
    for (let i = 0; i < 200 && Object.values(on).some((l) => l.length < n); i++) {
        const b = h.chatBody(h.uniq('cluster l1 keep busy'));
        const r = await proxy.post(CHAT, b, {...EXACT, 'cache-control': 'no-store'});
        h.assertFromUpstream(r, env.mock);
        const port = (await cluster.ownerOf(entryKey(r.headers['x-cache-key']))).port;
        if (on[port] && on[port].length < n)
            on[port].push(b);
    }
    assert.ok(Object.values(on).every((l) => l.length === n), `${n} keys on each primary`);
    return on;
}

/*
 * The bodies looked up in turn, one every everyMs whatever their answers take (a lookup
 * held behind the SET waits its redis-timeout: loops that each waited for their last answer
 * would send together, then fall silent for a whole window), until the returned stop() is
 * awaited.
 */
function keepBusy(proxy, bodies, everyMs = 20) {
    const inflight = new Set();
    let i = 0;
    const timer = setInterval(() => {
        const p = proxy.post(CHAT, bodies[i++ % bodies.length],
            {...EXACT, 'cache-control': 'no-store'}).catch(() => {});
        inflight.add(p);
        p.finally(() => inflight.delete(p));
    }, everyMs);
    return () => {
        clearInterval(timer);
        return Promise.all(inflight);
    };
}

const digits = (n) => String(n).length;

/*
 * An answer stored by proxy on another primary than the stream's, the last call to the mock,
 * numbered so that a refresh's (the next call or so) has as many digits: then both entries
 * have one length. {body, key, old (the response), entryNode}.
 */
async function entryOffStream(proxy, streamNode) {
    for (let i = 0; i < 60; i++) {
        const body = h.chatBody(h.uniq('cluster l1 held refresh'));
        const old = await proxy.post(CHAT, body);
        h.assertFromUpstream(old, env.mock);
        const key = entryKey(old.headers['x-cache-key']);
        const n = h.answerSeq(h.chatText(old.json));
        const entryNode = (await cluster.ownerOf(key)).port;
        if (entryNode !== streamNode && digits(n) === digits(n + 10))
            return {body, key, old, entryNode};
    }
    assert.fail('no entry on another primary than the stream');
}

/*
 * With the writer's redis-timeout short, the EXISTS it sends behind its SET times out (20 x
 * 150 ms) while the primary still holds the SET, and its lookups of other keys there keep
 * the connection alive through the pause. The set event sent on that timeout was read before
 * the SET ran: the reader that applied it read the old answer again, kept it in its L1, and
 * served it after the refresh had landed (the two of one length: its check missed it).
 */
h.test('a refresh whose SET its primary holds past the EXISTS behind it, on a live connection: ' +
    'the old answer does not stay in an L1', {timeout: 120000}, async () => {
    cluster = await startCluster({primaries: 3, replicas: 0});
    try {
        const reader = await startOne();
        const writer = await startOne(['--redis-timeout', '150']);
        await listsBuilt();
        const streamNode = (await cluster.ownerOf(STREAM)).port;
        const busy = await busyBodies(writer, streamNode, 8);
        const {body, key, old, entryNode} = await entryOffStream(writer, streamNode);
        const oldLen = await cluster.command(entryNode, 'STRLEN', key);
        const events0 = (await reader.stats()).l1_events;
        const held0 = (await writer.stats()).l1_set_events_held || 0;
        const base = await lastId(streamNode);
        const applied = (sets) => h.waitFor(async () => {
            const ev = await eventsAfter(streamNode, base, key);
            return ev.sets >= sets && (await reader.stats()).l1_events - events0 >= ev.l1;
        }, {what: 'the reader to apply the stream\'s events', timeout: 20000});

        await cluster.command(entryNode, 'CLIENT', 'PAUSE', '60000', 'WRITE');
        let stop = null, refresh, client;
        try {
            stop = keepBusy(writer, busy[entryNode]);
            refresh = await writer.post(CHAT, body, {'cache-control': 'no-cache'});
            h.assertFromUpstream(refresh, env.mock, 'REFRESH');
            client = await h.waitFor(() => heldSet(entryNode), {what: 'the SET held'});
            /* The EXISTS behind the SET timed out: the event went (as it did), or waits. */
            await h.waitFor(async () => (await eventsAfter(streamNode, base, key)).sets > 0 ||
                ((await writer.stats()).l1_set_events_held || 0) > held0,
            {what: 'the EXISTS behind the SET to time out', timeout: 20000});
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
            /* The SET is still held, on the connection it came on: it was never dropped. */
            assert.equal(await heldSet(entryNode), client, 'the SET held on its connection');
        } finally {
            await cluster.command(entryNode, 'CLIENT', 'UNPAUSE');
            if (stop)
                await stop();
        }
        assert.doesNotMatch(writer.proc.output, new RegExp(`lost connection to [^\\n]*:${entryNode}\\b`));
        await h.waitFor(async () => String(await cluster.command(entryNode, 'GET', key))
            .includes(h.chatText(refresh.json)), {what: 'Redis to hold the refreshed answer'});
        assert.equal(await cluster.command(entryNode, 'STRLEN', key), oldLen,
            'the refreshed entry as long as the old one (else the L1\'s check finds it out)');
        await applied(1);
        const after = await reader.post(CHAT, body, {...EXACT, 'cache-control': 'no-store'});
        assert.equal(after.status, 200, after.text);
        assert.equal(h.chatText(after.json), h.chatText(refresh.json),
            `the refreshed answer, not the old one (${after.headers['x-cache-status']})`);
        assert.ok((await writer.stats()).l1_set_events_held > held0, 'the event waited');
    } finally {
        await Promise.all(env.proxies.splice(0).map((p) => p.stop(5000)));
        await cluster.stop();
    }
});

/*
 * A writer stopped while its set event waits for a held SET: the EXISTS owed on the
 * connection is completed by the store's teardown, nothing is left (ASan), it exits 0, and
 * Redis drops the SET with the connection (so no event was owed).
 */
h.test('a writer stopped while its set event waits for a held SET exits cleanly', {timeout: 120000},
    async () => {
        cluster = await startCluster({primaries: 3, replicas: 0});
        try {
            const writer = await startOne(['--redis-timeout', '150']);
            await listsBuilt();
            const streamNode = (await cluster.ownerOf(STREAM)).port;
            const busy = await busyBodies(writer, streamNode, 8);
            const {body, key, old, entryNode} = await entryOffStream(writer, streamNode);
            const held0 = (await writer.stats()).l1_set_events_held;
            await cluster.command(entryNode, 'CLIENT', 'PAUSE', '60000', 'WRITE');
            let stop = null;
            try {
                stop = keepBusy(writer, busy[entryNode]);
                const refresh = await writer.post(CHAT, body, {'cache-control': 'no-cache'});
                h.assertFromUpstream(refresh, env.mock, 'REFRESH');
                await h.waitFor(() => heldSet(entryNode), {what: 'the SET held'});
                await h.waitFor(async () => (await writer.stats()).l1_set_events_held > held0,
                    {what: 'the set event to wait', timeout: 20000});
                const exited = writer.stop(15000);
                await stop();
                stop = null;
                assert.equal(await exited, 0, 'the writer\'s exit status');
                await h.waitFor(async () => await heldSet(entryNode) === null,
                    {what: 'Redis to drop the held SET with its connection'});
            } finally {
                await cluster.command(entryNode, 'CLIENT', 'UNPAUSE');
                if (stop)
                    await stop();
            }
            assert.ok(String(await cluster.command(entryNode, 'GET', key)).includes(h.chatText(old.json)),
                'Redis holds the old answer: the held SET never ran');
        } finally {
            await Promise.all(env.proxies.splice(0).map((p) => p.stop(5000)));
            await cluster.stop();
        }
    });
