'use strict';
/*
 * Replicas: repeated `upstream` entries form a pool. round-robin takes them in
 * turn, least-loaded avoids the one with calls in flight, a replica that
 * refuses the connection is skipped (the call goes to another one and the
 * client never notices), and /stats and /metrics show every replica.
 */
const assert = require('node:assert/strict');
const http = require('node:http');
const net = require('node:net');
const h = require('./lib');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';
const OFF = {'X-Cache-Mode': 'off'};

let second = null;
h.test('set up a second mock replica', async () => {
    second = await h.startMock();
});

function replicaName(mock) {
    return `127.0.0.1:${mock.port}`;
}

h.test('round-robin takes the replicas in turn and names them in X-Upstream', async () => {
    const proxy = await env.startProxy({
        upstream: [env.mock.url, second.url], workers: 1, args: ['--routing', 'round-robin'],
    });
    const a0 = env.mock.callCount(CHAT), b0 = second.callCount(CHAT);
    const seen = [];
    for (let i = 0; i < 6; i++) {
        const r = await proxy.post(CHAT, h.chatBody(h.uniq('rr')), OFF);
        assert.equal(r.status, 200, r.text);
        seen.push(r.headers['x-upstream']);
    }
    assert.equal(env.mock.callCount(CHAT) - a0, 3);
    assert.equal(second.callCount(CHAT) - b0, 3);
    for (let i = 1; i < seen.length; i++)
        assert.notEqual(seen[i], seen[i - 1], `alternates: ${seen}`);
    assert.deepEqual(new Set(seen), new Set([replicaName(env.mock), replicaName(second)]));
    const st = await proxy.stats();
    assert.equal(st.routing, 'round-robin');
    assert.equal(st.replicas.length, 2);
    for (const rep of st.replicas) {
        assert.equal(rep.requests, 3, JSON.stringify(rep));
        assert.equal(rep.in_flight, 0);
        assert.equal(rep.healthy, true);
    }
    await proxy.stop();
});

h.test('least-loaded sends new calls away from a replica with a call in flight', async () => {
    const proxy = await env.startProxy({
        upstream: [env.mock.url, second.url], workers: 2, args: ['--routing', 'least-loaded'],
    });
    const held = proxy.post(CHAT, h.chatBody(h.uniq('held')), {...OFF, 'x-mock-hold': 'll-1'});
    await h.waitFor(() => env.mock.isHolding('ll-1') || second.isHolding('ll-1'),
        {what: 'the held call to reach a replica'});
    const busy = env.mock.isHolding('ll-1') ? env.mock : second;
    const idle = busy === env.mock ? second : env.mock;
    const before = idle.callCount(CHAT);
    for (let i = 0; i < 4; i++) {
        const r = await proxy.post(CHAT, h.chatBody(h.uniq('ll')), OFF);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-upstream'], replicaName(idle));
    }
    assert.equal(idle.callCount(CHAT) - before, 4);
    const st = await proxy.stats();
    assert.equal(st.routing, 'least-loaded');
    assert.equal(st.replicas.find((x) => x.name === replicaName(busy)).in_flight, 1);
    busy.release('ll-1');
    assert.equal((await held).status, 200);
    await proxy.stop();
});

h.test('a replica that refuses connections is skipped without failing a request', async () => {
    const deadPort = await h.freePort();
    const dead = `http://127.0.0.1:${deadPort}`;
    /* Round robin, so the dead replica is sure to be tried (prefix routing spreads by hash). */
    const proxy = await env.startProxy({upstream: [dead, env.mock.url], workers: 1,
        args: ['--routing', 'round-robin']});
    const a0 = env.mock.callCount(CHAT);
    for (let i = 0; i < 6; i++) {
        const r = await proxy.post(CHAT, h.chatBody(h.uniq('failover')), OFF);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.headers['x-upstream'], replicaName(env.mock));
    }
    assert.equal(env.mock.callCount(CHAT) - a0, 6);
    const st = await proxy.stats();
    assert.ok(st.upstream_failovers >= 1, `upstream_failovers ${st.upstream_failovers}`);
    const deadRep = st.replicas.find((x) => x.name === `127.0.0.1:${deadPort}`);
    assert.equal(deadRep.healthy, false);
    assert.ok(deadRep.connect_errors >= 1);
    /* Marked down: after the first refusal the dead replica is not tried again. */
    assert.equal(deadRep.connect_errors, st.upstream_failovers);
    assert.equal(deadRep.requests, deadRep.connect_errors);
    await proxy.stop();
});

/*
 * doc/routing.md: a replica that answers server errors (500, 502, 503, 504)
 * three calls in a row is left out for upstream-fail-timeout, then gets one
 * call at a time until it answers without one; a 429 or any 4xx never
 * leaves a replica out. (Before, a replica answering 503 to everything kept
 * its share of the calls: half of them failed.)
 */
h.test('a replica that answers every call with a 5xx is left out after three, a 429 never', async () => {
    const proxy = await env.startProxy({upstream: [second.url, env.mock.url], workers: 1,
        args: ['--routing', 'round-robin', '--upstream-fail-timeout', '4']});
    const name = replicaName(second);
    const rep = async () => (await proxy.stats()).replicas.find((x) => x.name === name);
    const send = (tag) => proxy.post(CHAT, h.chatBody(h.uniq(tag)), OFF);
    try {
        second.failWith = 503;
        const statuses = [];
        for (let i = 0; i < 12; i++)
            statuses.push((await send('broken replica')).status);
        assert.equal(statuses.filter((s) => s === 503).length, 3, `three 503s, then elsewhere: ${statuses}`);
        assert.equal(statuses.filter((s) => s === 200).length, 9);
        let r = await rep();
        assert.equal(r.healthy, false, 'left out for upstream-fail-timeout');
        assert.equal(r.server_errors, 3);
        assert.equal(r.errors, 0, 'it answered: no failed call');
        assert.match(proxy.stderr, new RegExp(`upstream ${name} answered 3 calls in a row with a server error`));

        /* Back after upstream-fail-timeout, one call at a time: still broken, left out again. */
        await h.waitFor(async () => (await rep()).healthy, {what: 'the replica to be tried again'});
        const again = await Promise.all([0, 1, 2, 3, 4, 5].map((i) => send(`again ${i}`)));
        assert.equal(again.filter((x) => x.status === 503).length, 1, `one probe: ${again.map((x) => x.status)}`);
        assert.equal((await rep()).server_errors, 4);

        /* Mended: the next probe is answered, and it takes its share again. */
        second.failWith = null;
        await h.waitFor(async () => (await rep()).healthy, {what: 'the replica to be tried again'});
        const b0 = second.callCount(CHAT);
        for (let i = 0; i < 6; i++)
            assert.equal((await send('mended')).status, 200);
        assert.equal(second.callCount(CHAT) - b0, 3, 'its turn again');
        assert.match(proxy.stderr, new RegExp(`upstream ${name} answers again`));

        /* 429 (and any 4xx) is the caller's or the quota's, not the replica's health. */
        second.failWith = 429;
        const limited = [];
        for (let i = 0; i < 10; i++)
            limited.push((await send('rate limited')).status);
        assert.equal(limited.filter((s) => s === 429).length, 5, `${limited}`);
        r = await rep();
        assert.equal(r.healthy, true);
        assert.equal(r.server_errors, 4);
    } finally {
        second.failWith = null;
        await proxy.stop();
    }
});

h.test('a replica whose connection never completes is skipped too, without failing a request', async () => {
    /* It takes the TCP connection but never answers the TLS handshake: like a dead host that drops
     * SYNs, the call times out before any request byte is written, so the replica never saw it. */
    const silent = [];
    const server = net.createServer((s) => silent.push(s));
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const hung = `127.0.0.1:${server.address().port}`;
    try {
        /* Whichever runs out first: the connect timeout, or upstream-timeout before any byte. */
        for (const timeouts of [['--upstream-connect-timeout', '0.5'],
            ['--upstream-connect-timeout', '30', '--upstream-timeout', '0.5']]) {
            const proxy = await env.startProxy({upstream: [`https://${hung}`, env.mock.url], workers: 1,
                args: ['--routing', 'round-robin', ...timeouts]});
            for (let i = 0; i < 4; i++) {
                const r = await proxy.post(CHAT, h.chatBody(h.uniq('hung replica')), OFF);
                assert.equal(r.status, 200, r.text);
                assert.equal(r.headers['x-upstream'], replicaName(env.mock));
            }
            const st = await proxy.stats();
            const rep = st.replicas.find((x) => x.name === hung);
            assert.equal(rep.healthy, false, 'left out for upstream-fail-timeout');
            assert.equal(rep.requests, 1, 'tried once, then left out');
            assert.equal(st.upstream_failovers, 1);
            await proxy.stop();
        }
        /* No other replica: still the 504 of a timeout. */
        const alone = await env.startProxy({upstream: [`https://${hung}`], workers: 1,
            args: ['--upstream-connect-timeout', '0.5']});
        h.assertOpenAIError(await alone.post(CHAT, h.chatBody(h.uniq('hung alone')), OFF), 504);
        await alone.stop();
    } finally {
        silent.forEach((s) => s.destroy());
        await new Promise((resolve) => server.close(resolve));
    }
});

h.test('every replica refusing gives 502 in the API shape', async () => {
    const p1 = await h.freePort(), p2 = await h.freePort();
    const proxy = await env.startProxy({
        upstream: [`http://127.0.0.1:${p1}`, `http://127.0.0.1:${p2}`], workers: 1,
    });
    const r = await proxy.post(CHAT, h.chatBody(h.uniq('all dead')), OFF);
    h.assertOpenAIError(r, 502);
    const st = await proxy.stats();
    assert.equal(st.replicas.reduce((n, x) => n + x.connect_errors, 0), 2, 'each tried once');
    await proxy.stop();
});

h.test('/metrics has one series per replica', async () => {
    const proxy = await env.startProxy({upstream: [env.mock.url, second.url], workers: 1});
    await proxy.post(CHAT, h.chatBody(h.uniq('metrics')), OFF);
    const m = await proxy.get('/metrics');
    assert.equal(m.status, 200);
    for (const mock of [env.mock, second]) {
        const line = `promptcache_replica_requests_total{upstream="${replicaName(mock)}"}`;
        assert.ok(m.text.includes(line), `${line} in /metrics`);
        assert.ok(m.text.includes(`promptcache_replica_up{upstream="${replicaName(mock)}"} 1`));
    }
    await proxy.stop();
});

h.test('replicas behind one host:port (told apart by path) keep apart in /stats, /metrics and X-Upstream', async () => {
    /* A gateway that routes /a/... and /b/... to two engines (here both to the mock). */
    const gw = http.createServer((req, res) => {
        const m = /^\/(a|b)(\/.*)$/.exec(req.url);
        const up = http.request(env.mock.url + m[2], {method: req.method, headers: req.headers}, (ur) => {
            res.writeHead(ur.statusCode, {...ur.headers, 'x-engine': m[1]});
            ur.pipe(res);
        });
        req.pipe(up);
    });
    await new Promise((resolve) => gw.listen(0, '127.0.0.1', resolve));
    const at = `127.0.0.1:${gw.address().port}`;
    try {
        const proxy = await env.startProxy({upstream: [`http://${at}/a`, `http://${at}/b`], workers: 1,
            args: ['--routing', 'round-robin']});
        for (let i = 0; i < 4; i++) {
            const r = await proxy.post(CHAT, h.chatBody(h.uniq('by path')), OFF);
            assert.equal(r.status, 200, r.text);
            assert.equal(r.headers['x-upstream'], `${at}/${r.headers['x-engine']}`);
        }
        const st = await proxy.stats();
        assert.deepEqual(st.replicas.map((x) => [x.name, x.requests]), [[`${at}/a`, 2], [`${at}/b`, 2]]);
        const series = (await proxy.get('/metrics')).text.split('\n')
            .filter((l) => l !== '' && !l.startsWith('#')).map((l) => l.replace(/ \S+$/, ''));
        assert.deepEqual(series.filter((k, i) => series.indexOf(k) !== i), [], 'no series twice in /metrics');
        await proxy.stop();
    } finally {
        await new Promise((resolve) => gw.close(resolve));
    }
});

h.test('a follow-up naming a response one replica stored reaches that replica', async () => {
    /* Each replica (vLLM, SGLang) keeps the responses it created: the others answer 404. */
    const proxy = await env.startProxy({upstream: [env.mock.url, second.url], workers: 1,
        args: ['--routing', 'round-robin']});
    for (let i = 0; i < 4; i++) {
        const first = await proxy.post('/v1/responses', {model: 'm', input: h.uniq('stored turn')}, OFF);
        assert.equal(first.status, 200, first.text);
        const next = await proxy.post('/v1/responses',
            {model: 'm', input: 'and then?', previous_response_id: first.json.id}, OFF);
        assert.equal(next.status, 200, next.text);
        assert.equal(next.headers['x-upstream'], first.headers['x-upstream'], 'the replica that holds it');
    }
    /* Held by none: the 404 once every replica said so. */
    const none = await proxy.post('/v1/responses', {model: 'm', input: 'x', previous_response_id: 'resp_nowhere'}, OFF);
    assert.equal(none.status, 404, none.text);
    await proxy.stop();
});

h.test('a response held by no replica is a 404 even when a replica asked after the 404 is down (was: 502)', async () => {
    /* The 404 of the replica that answered was dropped to ask the next one; that one refused the
       connection, and the client got the refusal: a 502 it may retry forever, for a response that
       exists nowhere. */
    const deadPort = await h.freePort();
    const proxy = await env.startProxy({upstream: [env.mock.url, `http://127.0.0.1:${deadPort}`],
        workers: 1, args: ['--routing', 'round-robin']});
    for (let i = 0; i < 2; i++) { /* in turn: the mock first, then the dead replica first */
        const r = await proxy.post('/v1/responses',
            {model: 'm', input: 'x', previous_response_id: `resp_nowhere_${i}`}, OFF);
        h.assertOpenAIError(r, 404);
        assert.match(r.json.error.message, /not found/, r.text);
        assert.equal(r.headers['x-upstream'], replicaName(env.mock), 'the replica that answered');
    }
    await proxy.stop();
});

h.test('tear down the second mock', async () => {
    await second.close();
});
