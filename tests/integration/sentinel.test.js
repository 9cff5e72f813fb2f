'use strict';
/*
 * Redis Sentinel: two proxy instances on `--redis sentinel://...` (a primary,
 * a replica, three sentinels on loopback, which require a password of their
 * own: redis-sentinel-password) under a steady stream of cacheable
 * requests from several clients; the primary is SIGKILLed. Shown: no client
 * request fails (every answer 200; BYPASS while there is no primary), the
 * sentinels promote the replica and every Redis client of both processes
 * follows by itself - the worker stores (HITs again, entries written to the
 * new primary), the semantic index's reader (a reworded question stored
 * through one instance hits by meaning through the other) and the prefix
 * index's writer and reader (a record of one instance reaches the other's
 * index) - and the tools (report, migrate) reach the new primary through
 * the sentinels.
 *
 * From the kill on, each instance is also probed: its /readyz is polled and
 * a unique question asked every few milliseconds. Every answer asked for
 * after the instance's /readyz said ready again must have been stored (a
 * request with no-store through the other instance hits it); the test prints,
 * per instance, when /readyz said ready again and when the first answer that
 * was stored was asked for, both from the kill.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const h = require('./lib');
const {startSentinelGroup} = require('./lib/sentinel');
const {startDribbler, masterAddrReply} = require('./lib/dribble');
const {startVllmMock} = require('../mock/vllm');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({redis: false, proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const SENTINEL_PASSWORD = 'sentinel-only-5e1f';
const CLIENTS = 4;
const PACE_MS = 5; /* each client's pause between two requests */

let group = null;
let sem = null;
let reps = [];
let a = null;
let b = null;

const body = (text) => ({model: 'mock-vllm', max_tokens: 4,
    messages: [{role: 'system', content: 'You are terse.'}, {role: 'user', content: text}]});

/* A conversation whose long first turn makes a prefix chain worth routing by. */
function conversation(topic, n) {
    const messages = [{role: 'user', content: `${topic}: ${'context '.repeat(600)}`}];
    for (let i = 1; i < n; i++)
        messages.push({role: 'assistant', content: `answer ${i}`}, {role: 'user', content: `${topic} follow-up ${i}`});
    return {model: 'mock-vllm', messages, max_tokens: 4};
}

function proxyArgs() {
    return ['--upstream-type', 'vllm', '--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'openai',
        '--embedder-url', sem.url, '--embedder-model', 'mock-bow', '--semantic-threshold', '0.9'];
}

/*
 * CLIENTS loops sending cacheable requests through a and b in turn, each
 * pausing PACE_MS between two, until stop(): a few questions asked over and over (HITs) and a new one now and
 * then (MISS, stored, a prefix record). Every answer is kept.
 */
function startLoad() {
    const answers = [];
    let running = true;
    const pool = Array.from({length: 8}, (_, i) => h.uniq(`load question ${i}`));
    const loops = Array.from({length: CLIENTS}, async (_, c) => {
        for (let n = 0; running; n++) {
            const proxy = (c + n) % 2 ? a : b;
            const text = n % 5 === 4 ? h.uniq(`fresh ${c}`) : pool[(c * 3 + n) % pool.length];
            const t = Date.now();
            try {
                const r = await proxy.post(CHAT, body(text));
                answers.push({t, status: r.status, cache: r.headers['x-cache-status'], text: r.text});
            } catch (e) {
                answers.push({t, status: 0, cache: null, text: e.message});
            }
            await h.sleep(PACE_MS); /* a steady stream, not a flood: time is the behaviour here */
        }
    });
    return {answers, stop: async () => {
        running = false;
        await Promise.all(loops);
    }};
}

const stats = async (p) => p.stats();

/* The prompt tokens p's prefix index believes each replica holds, by name. */
const held = async (p) => Object.fromEntries((await stats(p)).replicas.map((x) => [x.name, x.index_tokens]));

function assertMiss(r) {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-cache-status'], 'MISS', 'X-Cache-Status');
}

/*
 * Record a conversation through `from` and wait until `to` has applied that
 * record: the tokens `to`'s index holds on the replica that answered grow by
 * the conversation's ~1200. Counts of applied records are moved by the
 * background load's records too (short prompts: a few tokens each).
 */
async function shareRecord(from, to, label) {
    const before = await held(to);
    const r = await from.post(CHAT, conversation(h.uniq(label), 1), NO_STORE);
    assert.equal(r.status, 200, r.text);
    const home = r.headers['x-upstream'];
    await h.waitFor(async () => (await held(to))[home] >= before[home] + 1000,
        {timeout: 30000, what: () => `the other instance applying the record on ${home} (${label})`});
}

/*
 * From the kill on, for each instance: /readyz polled (its transitions kept)
 * and a unique cacheable question asked every PACE_MS or so (each answer
 * kept with the time it was sent). stop() ends both loops.
 */
function startProbes(instances, t0) {
    const per = {};
    let running = true;
    const loops = Object.entries(instances).flatMap(([name, p]) => {
        const rec = per[name] = {ready: [], probes: []};
        const readyz = (async () => {
            for (let last = null; running;) {
                const status = (await p.get('/readyz')).status;
                if (status !== last)
                    rec.ready.push({t: Date.now() - t0, status});
                last = status;
                await h.sleep(PACE_MS); /* a poll, not a wait for something */
            }
        })();
        const asks = (async () => {
            for (let i = 0; running; i++) {
                const q = body(h.uniq(`probe ${name} ${i}`));
                const t = Date.now() - t0;
                try {
                    const r = await p.post(CHAT, q);
                    rec.probes.push({q, t, status: r.status, cache: r.headers['x-cache-status']});
                } catch (e) {
                    rec.probes.push({q, t, status: 0, cache: null, error: e.message});
                }
                await h.sleep(PACE_MS);
            }
        })();
        return [readyz, asks];
    });
    return {per, stop: async () => {
        running = false;
        await Promise.all(loops);
    }};
}

/* When rec's /readyz said ready again after saying 503 (ms after the kill), or null. */
function readyAgain(rec) {
    const down = rec.ready.findIndex((x) => x.status !== 200);
    const up = down < 0 ? null : rec.ready.slice(down).find((x) => x.status === 200);
    return up ? up.t : null;
}

h.test('set up: a primary, a replica, three sentinels, two proxies', {timeout: 90000}, async () => {
    group = await startSentinelGroup({password: SENTINEL_PASSWORD});
    await group.ready();
    sem = await createSemanticMock().listen();
    reps = [await startVllmMock({name: 'v0', usPerToken: 0, usPerOutputToken: 0}),
        await startVllmMock({name: 'v1', usPerToken: 0, usPerOutputToken: 0})];
    const start = () => env.startProxy({redis: group.url(), upstream: reps.map((r) => r.url),
        args: proxyArgs(), waitReady: false, env: {PROMPTCACHE_REDIS_SENTINEL_PASSWORD: SENTINEL_PASSWORD}});
    a = await start();
    b = await start();
    await a.waitReady(200, 20000);
    await b.waitReady(200, 20000);
    const primaryLine = new RegExp(`connected to primary mymaster at 127\\.0\\.0\\.1:${group.primary.port}`);
    await h.waitFor(() => primaryLine.test(a.proc.output), {what: 'the primary named in the log'});
});

h.test('the primary dies under load: no request fails, every client follows the new primary', {timeout: 150000}, async () => {
    const load = startLoad();
    let probes = null;
    try {
        /* caching works, and the background clients are following the stream and sets */
        await h.waitFor(async () => (await stats(a)).cache_hits > 0 && (await stats(b)).cache_hits > 0,
            {timeout: 20000, what: 'HITs through both instances'});
        await shareRecord(a, b, 'before');

        /* the kill; from now on each instance is probed (see below) */
        const oldPort = group.primary.port;
        const killedAt = Date.now();
        probes = startProbes({a, b}, killedAt);
        await group.primary.kill();
        await h.waitFor(async () => (await group.masterPort(0)) === group.replica.port,
            {timeout: 60000, interval: 100, what: 'the sentinels to promote the replica'});
        const promotedAt = Date.now();

        /* the stores follow */
        await a.waitReady(200, 30000);
        await b.waitReady(200, 30000);
        const readyAt = Date.now();
        const before = {a: await stats(a), b: await stats(b)};
        const keysBefore = Number(await group.replica.command('DBSIZE'));

        /* exact entries are written to the new primary and hit through the other instance */
        const q = body(h.uniq('after the failover'));
        assertMiss(await a.post(CHAT, q));
        h.assertHit(await b.post(CHAT, q)); /* stored before a's answer was sent */
        assert.ok(Number(await group.replica.command('DBSIZE')) > keysBefore, 'entries written to the new primary');
        await h.waitFor(async () => (await stats(a)).cache_hits > before.a.cache_hits &&
            (await stats(b)).cache_hits > before.b.cache_hits, {timeout: 20000, what: 'the load\'s HITs again on both'});

        /*
         * The semantic index's reader of b follows the new primary's stream: this question's
         * vector, stored through a, reaches b's index. b is asked (no-store: a miss stores
         * nothing, so asking again is safe) until it hits: a count of applied stream events
         * is moved by the load's vectors too. The rewording has the same words (the mock
         * embeds a signed bag of words in 64 buckets: with a word less, a tag sharing its
         * bucket dropped the cosine under 0.9 for about 4% of tags).
         */
        const tag = h.uniq('t').split(' ')[1];
        const stored = await a.post(CHAT, body(`how tall is mount everest ${tag}`));
        assertMiss(stored);
        try {
            await h.eventually(async () => {
                const r = await b.post(CHAT, body(`mount everest: how tall is ${tag}`), NO_STORE);
                assert.equal(r.headers['x-cache-match'], 'semantic', `X-Cache-Match (${r.headers['x-cache-status']})`);
                assert.deepEqual(r.json.choices, stored.json.choices, 'the answer a stored');
            }, {timeout: 30000, interval: 100});
        } catch (e) {
            const st = await stats(b);
            e.message += ` (b: ${JSON.stringify(Object.fromEntries(Object.entries(st)
                .filter(([k]) => /^semantic_|^redis_/.test(k))))})`;
            throw e;
        }

        /* the prefix index's writer (a) and reader (b) too: a's new record reaches b */
        await shareRecord(a, b, 'after');

        /* every instance stores answers again, at the latest once its /readyz says so */
        await h.waitFor(() => Object.values(probes.per).every((rec) => readyAgain(rec) !== null &&
            rec.probes.filter((x) => x.t >= readyAgain(rec)).length >= 5),
        {timeout: 30000, what: 'five probes of each instance after its /readyz said ready again'});
        await probes.stop();
        await load.stop();
        const figures = [];
        for (const [name, rec] of Object.entries(probes.per)) {
            const other = name === 'a' ? b : a;
            /* stored: the other instance (whose L1 never saw it) hits it without storing anything */
            for (const x of rec.probes.filter((y) => y.cache === 'MISS'))
                x.stored = (await other.post(CHAT, x.q, NO_STORE)).headers['x-cache-status'] === 'HIT';
            const ready = readyAgain(rec);
            const after = rec.probes.filter((x) => x.t >= ready);
            const unstored = after.filter((x) => !x.stored);
            assert.deepEqual(unstored.slice(0, 5).map(({t, status, cache}) => ({t, status, cache})), [],
                `${name}: ${unstored.length} of ${after.length} answers asked for after /readyz said ready ` +
                `again (+${ready} ms) were not stored`);
            const first = rec.probes.find((x) => x.stored);
            const pre = rec.probes.filter((x) => x.t < ready);
            figures.push(`${name}: /readyz ready again +${ready} ms, first stored answer asked at +${first.t} ms ` +
                `(before /readyz: ${pre.filter((x) => x.cache === 'BYPASS').length} BYPASS, ` +
                `${pre.filter((x) => x.cache === 'MISS' && !x.stored).length} MISS not stored, ` +
                `${pre.filter((x) => x.stored).length} stored)`);
        }

        const all = [...load.answers, ...Object.values(probes.per).flatMap((rec) => rec.probes)];
        const failed = all.filter((x) => x.status !== 200);
        assert.deepEqual(failed.slice(0, 5), [], `${failed.length} of ${all.length} requests failed`);
        const during = load.answers.filter((x) => x.t >= killedAt && x.t < readyAt);
        const after = load.answers.filter((x) => x.t >= readyAt);
        assert.ok(during.length > 0, 'requests were sent during the failover');
        assert.ok(after.some((x) => x.cache === 'HIT'), 'HITs after the failover');
        for (const p of [a, b])
            assert.ok(!p.proc.output.includes(SENTINEL_PASSWORD), 'the sentinels\' password is never logged');
        const count = (list, c) => list.filter((x) => x.cache === c).length;
        process.stdout.write(`# sentinel failover: ${all.length} requests, 0 failed; primary :${oldPort} ` +
            `killed, replica promoted after ${promotedAt - killedAt} ms, both proxies ready after ` +
            `${readyAt - killedAt} ms; during the failover ${during.length} requests of the load ` +
            `(${count(during, 'BYPASS')} BYPASS, ${count(during, 'HIT')} HIT, ${count(during, 'MISS')} MISS); ` +
            `per instance, from the kill: ${figures.join('; ')}\n`);
    } finally {
        if (probes)
            await probes.stop();
        await load.stop();
    }
});

h.test('the tools reach the new primary through the sentinels', async () => {
    const file = path.join(h.tmpDir('pc-secret-'), 'sentinel');
    fs.writeFileSync(file, `${SENTINEL_PASSWORD}\n`, {mode: 0o600});
    const auth = ['--redis-sentinel-password-file', file];
    const m = await h.runCli(['migrate', '--redis', group.url(), ...auth, '--dry-run']);
    assert.equal(m.code, 0, m.output);
    assert.match(m.stdout, /the schema is current/);
    /* the workers flush their counts about once a second, also those of the failover */
    await h.waitFor(async () => {
        const r = await h.runCli(['report', '--redis', group.url(), ...auth, '--format', 'json']);
        assert.equal(r.code, 0, r.output);
        const j = JSON.parse(r.stdout);
        return j.total.requests > 0 && j.total.hits > 0 && j.total.bypasses > 0;
    }, {timeout: 15000, what: 'the report to show requests, hits and the failover\'s bypasses'});
    /* without the sentinels' password, or with all of them gone, the tools say why */
    const noauth = await h.runCli(['report', '--redis', group.url()]);
    assert.equal(noauth.code, 1);
    assert.match(noauth.stderr, /NOAUTH/);
    const dead = await h.freePort();
    const down = await h.runCli(['report', '--redis', `sentinel://127.0.0.1:${dead}/mymaster`]);
    assert.equal(down.code, 1);
    assert.match(down.stderr, new RegExp(`sentinel 127\\.0\\.0\\.1:${dead}: `));
});

/*
 * A sentinel (or whatever answers on its address) that announces a bulk of 2^40 bytes and keeps
 * sending them: hiredis 0.14 buffers any announced length, and the blocking query read on for
 * as long as bytes came. It gives up once the reply passes what a sentinel ever answers (1 MiB)
 * and says so; the fake stops at 64 MiB, which the old query read whole.
 */
h.test('a sentinel that sends an endless bulk: the query gives up before 8 MiB and says why', {timeout: 60000}, async () => {
    const LIMIT = 64 << 20;
    const seen = {sent: 0, closed: false, closedByPeer: false};
    const server = net.createServer((sock) => {
        sock.on('error', () => {});
        sock.on('close', () => {
            seen.closed = true;
            if (seen.sent < LIMIT)
                seen.closedByPeer = true;
        });
        sock.once('data', () => {
            sock.write('$1099511627776\r\n');
            const chunk = Buffer.alloc(64 << 10, 'x');
            const pump = () => {
                while (seen.sent < LIMIT && !sock.destroyed) {
                    seen.sent += chunk.length;
                    if (!sock.write(chunk))
                        return void sock.once('drain', pump);
                }
                sock.end();
            };
            pump();
        });
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
        const port = server.address().port;
        const r = await h.runCli(['report', '--redis', `sentinel://127.0.0.1:${port}/mymaster`,
            '--redis-timeout', '5000'], {timeout: 40000});
        assert.equal(r.code, 1, r.output);
        assert.match(r.stderr, new RegExp(`sentinel 127\\.0\\.0\\.1:${port}: .*larger than`));
        /* the tool's exit is seen before its socket's close may be */
        await h.waitFor(() => seen.closed, {what: 'the fake sentinel\'s socket closed'});
        assert.ok(seen.closedByPeer && seen.sent < 8 << 20,
            `the query read ${(seen.sent / 1048576).toFixed(1)} MiB before it gave up`);
    } finally {
        server.close();
    }
});

/*
 * A sentinel (or whatever answers on its address) that sends its answer a byte at a time, each
 * byte well within the timeout of one read (400 ms of 1 s): hiredis 0.14 bounds each read only,
 * and the blocking query read on for as long as bytes came - the answer here would take 15 s,
 * and names the dribbler itself as the primary, whose every reply takes minutes. The query has
 * one deadline (1 s) for connecting, AUTH and the answer: the tools give up and say so.
 */
h.test('a sentinel that answers a byte at a time: the tools give up at the query\'s deadline and say why', {timeout: 90000}, async () => {
    let self = 0;
    const d = await startDribbler({everyMs: 400,
        reply: (name) => (name === 'SENTINEL' ? masterAddrReply('127.0.0.1', self) : `$1000\r\n${'x'.repeat(1000)}\r\n`)});
    self = d.port;
    try {
        for (const tool of [['report'], ['migrate', '--dry-run'], ['purge', '--all', '--dry-run']]) {
            const r = await h.runCli([...tool, '--redis', `sentinel://${d.at}/mymaster`,
                '--redis-timeout', '1000'], {timeout: 25000});
            assert.equal(r.code, 1, `${tool[0]}: ${r.output}`);
            assert.match(r.stderr, new RegExp(`sentinel 127\\.0\\.0\\.1:${d.port}: timed out \\(no reply in time\\): ` +
                'did not answer within 1000 ms'), `${tool[0]}: ${r.output}`);
        }
        await h.waitFor(() => d.gaveUp() >= 3, {timeout: 5000, what: 'the tools to hang up on the sentinel'});
    } finally {
        await d.close();
    }
});

/*
 * The sentinel answers at once, naming a primary that answers a byte at a time: the tools'
 * connection (its ROLE check, then any command) has a deadline per reply, the whole of it
 * within redis-timeout (at least 1 s), not each read.
 */
h.test('a primary that answers a byte at a time: the tools give up at the reply\'s deadline and say why', {timeout: 90000}, async () => {
    const primary = await startDribbler({everyMs: 400});
    const sentinel = await startDribbler({everyMs: 1, reply: () => masterAddrReply('127.0.0.1', primary.port)});
    try {
        const r = await h.runCli(['report', '--redis', `sentinel://${sentinel.at}/mymaster`,
            '--redis-timeout', '1000'], {timeout: 25000});
        assert.equal(r.code, 1, r.output);
        assert.match(r.stderr, new RegExp(`primary mymaster at 127\\.0\\.0\\.1:${primary.port}: ROLE: ` +
            'timed out \\(no reply in time\\): no whole reply within 1000 ms'), r.output);
        assert.deepEqual(primary.asked(), ['ROLE']);
        await h.waitFor(() => primary.gaveUp() >= 1, {timeout: 5000, what: 'the tool to hang up on the primary'});
    } finally {
        await Promise.all([primary.close(), sentinel.close()]);
    }
});

/*
 * The proxy's background threads (the stream follower, the vector loader, the prefix writer
 * and reader) ask the sentinels with the blocking query: one that answers a byte at a time
 * held them for good. They give up at the query's deadline, say so in the log and try again;
 * the proxy serves from the upstream meanwhile and stops when told.
 */
h.test('a sentinel that answers a byte at a time: the proxy\'s threads give up, say why, and the proxy stops', {timeout: 90000}, async () => {
    const d = await startDribbler({everyMs: 400,
        reply: (name) => (name === 'SENTINEL' ? masterAddrReply('127.0.0.1', 1) : '-ERR no\r\n')});
    let p = null;
    try {
        p = await env.startProxy({redis: `sentinel://${d.at}/mymaster`, waitReady: false});
        const said = new RegExp(`sentinel 127\\.0\\.0\\.1:${d.port}: timed out \\(no reply in time\\): did not answer within 1000 ms`);
        await h.waitFor(() => said.test(p.proc.output), {timeout: 30000, what: 'a thread to give up on the sentinel'});
        const r = await p.post(CHAT, body('asked while no sentinel answers'));
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-cache-status'], 'BYPASS');
        const code = await p.stop();
        p = null;
        assert.equal(code, 0, 'the proxy stopped by itself');
    } finally {
        if (p)
            await p.kill();
        await d.close();
    }
});

h.test('tear down', async () => {
    await Promise.all([a, b].filter(Boolean).map((p) => p.stop()));
    await Promise.all(reps.map((r) => r.close()));
    if (sem)
        await sem.close();
    if (group)
        await group.stop();
});
