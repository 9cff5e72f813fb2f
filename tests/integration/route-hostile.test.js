'use strict';
/*
 * Hostile data read back for routing. What another writer (an old version, a
 * broken instance, an attacker with access to Redis) leaves in a replica's
 * set of the shared prefix index (pc:2:pz:{replica}) is input: it must not
 * keep the proxy from following the streams other instances write, nor push
 * the sound members out of the set. A replica that takes every call and
 * answers none must not keep its share of the calls.
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');
const {rawCommand, link, record, randomHash} = require('./lib/prefix-records');
const {startVllmMock} = require('../mock/vllm');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const NO_STORE = {'cache-control': 'no-store'};
const STREAM = 'pc:2:px';

h.test('a huge member in a replica\'s set does not stop the follower: the L1 and the prefix stream are followed', {timeout: 120000}, async () => {
    /*
     * A member past the 64 MiB a Redis reply may have made the catch-up read of that set fail
     * at every start of the follower (it stays on top of the set, scored +inf, through every
     * trim): the follower retried forever, the L1 stayed off and no record of another
     * instance was applied. That set is now left out of catching up for a while.
     */
    const reps = [];
    const port = env.redis.port;
    try {
        for (let i = 0; i < 2; i++)
            reps.push(await startVllmMock({name: `v${i}`, usPerToken: 0, usPerOutputToken: 0}));
        const home = new URL(reps[0].url).host;
        const set = `pc:2:pz:{${home}}`;
        /* Past the 64 MiB a reply may have, scored to stay on top of the set through every trim. */
        await rawCommand(port, 'ZADD', set, '+inf', Buffer.alloc((80 << 20), 1));
        const a = await env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
            args: ['--upstream-type', 'vllm']});
        await h.waitFor(async () => {
            if ((await a.stats()).prefix_sync_applied > 0)
                return true;
            await rawCommand(port, 'XADD', STREAM, '*', 'd', record(Date.now(), home, [link(randomHash(), 50)]));
            return false;
        }, {what: 'a record of the prefix stream applied', timeout: 20000});
        const q = {model: 'mock-vllm', messages: [{role: 'user', content: h.uniq('huge')}], max_tokens: 4};
        const r = await a.post(CHAT, q, NO_STORE);
        assert.equal(r.status, 200, r.text);
        const st = await a.stats();
        assert.ok(st.prefix_records_rejected >= 1, `prefix_records_rejected ${st.prefix_records_rejected}`);
        assert.equal(st.l1_live, true);
        assert.match(a.proc.output, /a replica's set is too large to read/);
        assert.ok(a.alive);
        await a.stop();
    } finally {
        /* Every replica's set: the call's record is in that of the replica that took it. */
        for (const r of reps)
            await rawCommand(port, 'DEL', `pc:2:pz:{${new URL(r.url).host}}`);
        await Promise.all(reps.map((r) => r.close()));
    }
});

h.test('members of a replica\'s set scored in the future do not push the sound ones out of it', {timeout: 120000}, async () => {
    /*
     * A replica's set is trimmed to its newest members by rank. Members scored ahead of every
     * clock (an instance whose clock runs a year fast, or another writer) ranked above every
     * sound one, so each trim removed the sound members and kept those, which every instance
     * rejects when it restores: a new instance caught up on nothing. A trim now drops members
     * scored further ahead than a record's time may be.
     */
    const reps = [];
    const port = env.redis.port;
    let set = null;
    try {
        reps.push(await startVllmMock({name: 'v0', usPerToken: 0, usPerOutputToken: 0}));
        const home = new URL(reps[0].url).host;
        set = `pc:2:pz:{${home}}`;
        await rawCommand(port, 'DEL', set);
        /* prefix-capacity 1000: the set keeps its newest 1024 members; 1100 of them a year ahead. */
        const ahead = BigInt(Date.now() + 365 * 86400000) * 4096n;
        const args = [];
        for (let i = 0; i < 1100; i++)
            args.push(String(ahead + BigInt(i)), link(randomHash(), 1));
        await rawCommand(port, 'ZADD', set, ...args);
        const start = () => env.startProxy({upstream: reps.map((r) => r.url), workers: 1,
            args: ['--upstream-type', 'vllm', '--prefix-capacity', '1000']});
        const a = await start();
        /* TRIM_EVERY (64) records of a on the replica: its set trimmed once at least. */
        for (let i = 0; i < 70; i++) {
            const r = await a.post(CHAT, {model: 'mock-vllm', max_tokens: 4,
                messages: [{role: 'user', content: `${h.uniq('future')} ${'word '.repeat(8)}`}]}, NO_STORE);
            assert.equal(r.status, 200, r.text);
        }
        await h.waitFor(async () => (await a.stats()).prefix_sync_published >= 70,
            {what: 'a\'s records published'});
        await h.waitFor(async () => Number(await rawCommand(port, 'ZCOUNT', set, String(ahead), '+inf')) === 0,
            {what: 'the members a year ahead trimmed'});
        assert.ok(Number(await rawCommand(port, 'ZCARD', set)) > 0, 'a\'s members kept');
        /* A new instance catches up on them. */
        const b = await start();
        await h.waitFor(async () => (await b.stats()).replicas[0].index_tokens > 0,
            {what: 'b restoring sound members', timeout: 10000});
        await Promise.all([a.stop(), b.stop()]);
    } finally {
        if (set !== null)
            await rawCommand(port, 'DEL', set);
        await Promise.all(reps.map((r) => r.close()));
    }
});

/*
 * A replica that reads every call and resets the connection before any answer head (a server
 * that crashes on each request, a gateway whose backend is gone): those calls end in a 502, as
 * they may have run and are not sent twice. Such calls were never held against the replica: it
 * kept its share of the calls, all failing, and a conversation it took was believed held there.
 * Now they count in the run that three server errors make, and what they added to the index is
 * forgotten.
 */
h.test('a replica that resets every call before answering is left out after three, as a 5xx one', {timeout: 60000}, async () => {
    const good = await startVllmMock({name: 'good', usPerToken: 0, usPerOutputToken: 0});
    const socks = new Set();
    let calls = 0;
    const bad = net.createServer((sock) => {
        socks.add(sock);
        sock.on('error', () => { /* resets are what it is for */ });
        sock.on('close', () => socks.delete(sock));
        let buf = Buffer.alloc(0);
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            const end = buf.indexOf('\r\n\r\n');
            if (end < 0)
                return;
            const m = /\r\ncontent-length:\s*(\d+)/i.exec(buf.subarray(0, end).toString('latin1'));
            if (buf.length < end + 4 + (m ? Number(m[1]) : 0))
                return;
            calls++;
            sock.resetAndDestroy(); /* the whole request read, no answer */
        });
    });
    await new Promise((resolve) => bad.listen(0, '127.0.0.1', resolve));
    const badUrl = `http://127.0.0.1:${bad.address().port}`;
    const name = `127.0.0.1:${bad.address().port}`;
    const sets = [`pc:2:pz:{${name}}`, `pc:2:pz:{${new URL(good.url).host}}`];
    try {
        /*
         * Its port may be that of a replica of an earlier test of this file (ephemeral ports are
         * reused), whose set of the prefix index in this redis-server the proxy would restore
         * into this replica's index at its start.
         */
        for (const s of sets)
            await rawCommand(env.redis.port, 'DEL', s);
        const a = await env.startProxy({upstream: [badUrl, good.url], workers: 1,
            args: ['--upstream-type', 'vllm', '--routing', 'round-robin', '--upstream-fail-timeout', '300']});
        const statuses = [];
        for (let i = 0; i < 10; i++) {
            const topic = h.uniq('reset');
            const r = await a.post(CHAT, {model: 'mock-vllm', max_tokens: 4,
                messages: [{role: 'user', content: `${topic}: ${'context '.repeat(600)}`}]}, NO_STORE);
            statuses.push(r.status);
        }
        assert.equal(statuses.filter((s) => s === 502).length, 3, `three 502s, then elsewhere: ${statuses}`);
        assert.equal(calls, 3);
        const rep = (await a.stats()).replicas.find((x) => x.name === name);
        assert.equal(rep.healthy, false, 'left out for upstream-fail-timeout');
        assert.equal(rep.errors, 3);
        assert.equal(rep.server_errors, 0, 'it never answered');
        assert.equal(rep.index_tokens, 0, 'what those calls added to the index forgotten');
        assert.match(a.proc.output, new RegExp(`upstream ${name} gave 3 calls in a row no answer`));
        assert.ok(a.alive);
        await a.stop();
    } finally {
        for (const s of sets)
            await rawCommand(env.redis.port, 'DEL', s);
        socks.forEach((s) => s.destroy());
        await new Promise((resolve) => bad.close(resolve));
        await good.close();
    }
});
