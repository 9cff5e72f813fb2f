'use strict';
/*
 * SIGTERM: the proxy stops accepting connections, finishes the requests in
 * flight (JSON and streams) and exits 0, also with Redis frozen (nothing
 * waits for a reply from it).
 */
const assert = require('node:assert/strict');
const net = require('node:net');
const h = require('./lib');
const {startRespFault} = require('./lib/resp-fault');
const {createSemanticMock} = require('../mock/semantic');

const env = h.environment({proxy: false});

const CHAT = '/v1/chat/completions';

/*
 * What a new connection to port meets right now: 'refused' (connect fails, or
 * the server closes it unanswered), 'answered', or 'hung' (accepted by the
 * kernel but never served: the listening socket is still open).
 */
function probe(port) {
    return new Promise((resolve) => {
        const sock = net.connect({port, host: '127.0.0.1'});
        const done = (result) => {
            sock.destroy();
            resolve(result);
        };
        sock.setTimeout(1000, () => done('hung'));
        sock.once('error', () => done('refused'));
        sock.once('data', () => done('answered'));
        sock.once('close', () => done('refused'));
        sock.once('connect', () => sock.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    });
}

/* Resolves once new connections are refused; the error tells what they met instead. */
async function waitRefused(port) {
    let last = null;
    await h.waitFor(async () => (last = await probe(port)) === 'refused',
        {timeout: 5000, what: () => `new connections to be refused (last probe: ${last})`});
}

h.test('SIGTERM during a JSON request: it completes, exit code 0', async () => {
    const proxy = await env.startProxy();
    const calls = env.mock.callCount(CHAT);
    const pending = proxy.post(CHAT, h.chatBody(h.uniq('sigterm json')), {'x-mock-delay-ms': '1500'});
    await env.mock.waitForCalls(calls + 1, CHAT);
    const exited = proxy.stop(15000);
    const r = await pending;
    assert.equal(r.status, 200, r.text);
    assert.match(h.chatText(r.json), /^mock answer #\d+ to: sigterm json/);
    assert.equal(await exited, 0, 'exit code');
});

h.test('SIGTERM during a stream: the stream completes, exit code 0', async () => {
    const proxy = await env.startProxy();
    const id = h.uniq('hold').replace(' ', '-');
    const s = await proxy.openStream(CHAT, h.chatBody(h.uniq('sigterm stream'), h.STREAM_WITH_USAGE),
        {'x-mock-hold': id});
    await s.nextEvent(5000);
    const exited = proxy.stop(15000);
    /* While it drains, new connections are no longer accepted. */
    await waitRefused(proxy.port);
    assert.ok(proxy.alive, 'still running while the stream is in flight');
    env.mock.release(id);
    const end = await s.rest();
    assert.ok(end.complete, 'the stream ended normally');
    assert.ok(h.assembleChat(end.events).done, 'with [DONE]');
    assert.equal(await exited, 0, 'exit code');
});

h.test('SIGTERM with nothing in flight exits 0 promptly', async () => {
    const proxy = await env.startProxy();
    assert.equal(await proxy.stop(5000), 0, 'exit code (SIGKILL after 5 s)');
});

h.test('SIGTERM exits 0 while Redis is frozen: no thread waits out a blocked read', async () => {
    /*
     * The stream readers (the L1's, the vector index's) sit in XREAD BLOCK; with Redis frozen
     * its reply would come after redis-timeout (here 60 s) at the earliest. The shutdown cuts
     * those reads off (as it ended them after up to a second each on a live Redis): the
     * process exits 0 long before, with Redis still frozen.
     */
    const proxy = await env.startProxy({args: ['--redis-timeout', '60000', '--semantic', 'yes', '--semantic-max-error', 'off',
        '--embedder', 'hash']});
    await h.waitFor(async () => {
        const st = await proxy.stats();
        return st.l1_live === true && st.semantic_sync_ready === true;
    }, {what: 'both stream readers following the stream'});
    const pid = env.redis.proc.pid;
    process.kill(pid, 'SIGSTOP');
    try {
        assert.equal(await proxy.stop(20000), 0, 'exit code (SIGKILL after 20 s)');
    } finally {
        process.kill(pid, 'SIGCONT');
    }
});

h.test('SIGTERM while the stream follower applies vector events: exit code 0, no reader freed under it', async () => {
    /*
     * The follower thread passes each pc:2:vs entry to the vector index's reader. The
     * shutdown freed that reader (stopping the workers) while the follower was still
     * running, so an entry being applied at that moment read freed memory. ThreadSanitizer
     * (`make SANITIZE=thread`) reported it in most semantic files; the window is a few
     * microseconds, and this test, run 30 rounds on the old ASan binary, never hit it: it
     * keeps the path exercised (entries arriving while SIGTERM does), and the sanitizer
     * builds watch it.
     */
    const id = `${'ab'.repeat(8)}:${'cd'.repeat(32)}`;
    const flood = `for i = 1, tonumber(ARGV[1]) do redis.call('XADD', KEYS[1], '*', 'op', 'del', 'k', ARGV[2]) end return 1`;
    for (let round = 0; round < 4; round++) {
        const proxy = await env.startProxy({args: ['--semantic', 'yes', '--semantic-max-error', 'off',
            '--embedder', 'hash', '--workers', '2']});
        await h.waitFor(async () => (await proxy.stats()).semantic_sync_ready === true,
            {what: 'the vector index reader following the stream'});
        const before = (await proxy.stats()).stream_entries;
        let flooding = true;
        const c = await env.redis.client();
        const writer = (async () => {
            while (flooding)
                await c.command('EVAL', flood, '1', 'pc:2:vs', '2000', id);
        })();
        try {
            await h.waitFor(async () => (await proxy.stats()).stream_entries > before + 4000,
                {what: 'the follower reading the flood'});
            const code = await proxy.stop(20000);
            assert.doesNotMatch(proxy.proc.output, /Sanitizer|heap-use-after-free/, 'no sanitizer report');
            assert.equal(code, 0, `exit code, round ${round}`);
        } finally {
            flooding = false;
            await writer.catch(() => {});
            c.close();
            await env.redis.command('DEL', 'pc:2:vs');
        }
    }
});

h.test('SIGTERM while partition loads wait on a Redis that never answers: exit code 0', async () => {
    /*
     * A lookup in a partition not in memory has a pool thread wait (up to redis-timeout) for
     * the vector index's loader, whose read of the member list here never gets an answer.
     * The shutdown stops the pool (joining that thread) before it stops and frees the loader
     * the thread waits on, and then the index: this keeps that order exercised under the
     * sanitizer builds (no report, exit 0, well within redis-timeout twice).
     */
    const fault = await startRespFault(env.redis.port);
    const args = ['--semantic', 'yes', '--semantic-max-error', 'off', '--embedder', 'hash',
        '--workers', '3', '--redis-timeout', '4000', '--embedder-timeout', '300'];
    try {
        const questions = [0, 1, 2, 3, 4, 5].map((i) => h.uniq(`the loads at shutdown, topic ${i}:`));
        /* Through the fault proxy no one waits for Redis at start: a request before the
         * connection is a BYPASS, with no lookup (so no load). */
        const first = await env.startProxy({redis: fault.url, args});
        await first.waitReady(200, 20000);
        for (const q of questions)
            assert.equal((await first.post(CHAT, h.chatBody(q))).status, 200);
        assert.equal(await first.stop(), 0);
        /* A new process: every partition is cold, its load reads the member list first. */
        const proxy = await env.startProxy({redis: fault.url, args});
        await proxy.waitReady(200, 20000);
        fault.set('silent', {only: ['ZREVRANGEBYSCORE']});
        const pending = questions.map((q) => proxy.post(CHAT, h.chatBody(`${q} please`)));
        await h.waitFor(() => fault.answered('silent') > 0, {what: 'a partition load waiting on Redis'});
        const started = Date.now();
        const code = await proxy.stop(20000);
        for (const r of await Promise.all(pending))
            assert.equal(r.status, 200, r.text);
        assert.doesNotMatch(proxy.proc.output, /Sanitizer|heap-use-after-free/, 'no sanitizer report');
        assert.equal(code, 0, 'exit code');
        assert.ok(Date.now() - started < 8000, `stopped in ${Date.now() - started} ms`);
    } finally {
        fault.clear();
        await fault.close();
    }
});

h.test('SIGTERM with remote embeddings outstanding, answered before, during or after the teardown: exit code 0', async () => {
    /*
     * A remote embedder's calls run on each worker's side connection, for lookups and for
     * the vectors stored after an answer; the teardown hands back what the pool owes, then
     * ends the calls still open, and an answer may come while it runs (a vector indexed,
     * the index made for its dimension, after the pool and the reader were stopped).
     */
    for (const when of ['at the SIGTERM', 'during the drain', 'never']) {
        const emb = await createSemanticMock().listen();
        try {
            const proxy = await env.startProxy({args: ['--semantic', 'yes', '--embedder', 'openai',
                '--embedder-url', `${emb.url}/v1/embeddings`, '--embedder-model', 'mock-bow',
                '--embedder-timeout', '300', '--workers', '3', '--shutdown-timeout', '1',
                '--semantic-verify-url', `${emb.url}/v1/chat/completions`, '--semantic-verify-model', 'judge']});
            emb.hold = true;
            const answers = await Promise.all([0, 1, 2, 3, 4, 5].map((i) =>
                proxy.post(CHAT, h.chatBody(h.uniq(`held embeddings, subject ${i % 3}:`)))));
            for (const r of answers)
                assert.equal(r.status, 200, r.text);
            await h.waitFor(() => emb.held >= 1, {what: 'embedding calls held'});
            if (when === 'at the SIGTERM')
                emb.release();
            const exited = proxy.stop(20000);
            if (when === 'during the drain') {
                await h.waitFor(() => /SIGTERM received/.test(proxy.proc.output), {what: 'the SIGTERM taken'});
                emb.release();
            }
            const code = await exited;
            assert.doesNotMatch(proxy.proc.output, /Sanitizer|heap-use-after-free/, `no sanitizer report (${when})`);
            assert.equal(code, 0, `exit code (answered ${when})`);
        } finally {
            emb.release();
            await emb.close();
        }
    }
});

h.test('SIGTERM exits 0 while a dashboard read waits on a frozen Redis', async () => {
    /*
     * The dashboard's reader thread reads the hourly counts with blocking commands bounded by
     * 20 times redis-timeout; the shutdown joined it, so a read under way when Redis froze held
     * the exit for that long (seen as a SIGTERM that did not end the process in 20 s, when the
     * start-up read met the freeze). The read is left to finish on its own.
     */
    const proxy = await env.startProxy({args: ['--redis-timeout', '60000']});
    await proxy.waitReady();
    const pid = env.redis.proc.pid;
    process.kill(pid, 'SIGSTOP');
    try {
        /* A read starts once the last one is 2 s old: asked until the answer says one runs. */
        await h.waitFor(async () => {
            const r = await proxy.get('/dashboard/data?hours=1');
            assert.equal(r.status, 200, r.text);
            return r.json.reading === true;
        }, {what: 'a dashboard read under way against the frozen Redis', timeout: 15000});
        assert.equal(await proxy.stop(20000), 0, 'exit code (SIGKILL after 20 s)');
    } finally {
        process.kill(pid, 'SIGCONT');
    }
});

h.test('shutdown-timeout ends requests that outlast it, and still exits 0', async () => {
    const proxy = await env.startProxy({args: ['--shutdown-timeout', '0.5', '--workers', '4']});
    const streams = [];
    for (let i = 0; i < 3; i++) {
        const id = h.uniq('stuck').replace(' ', '-');
        const s = await proxy.openStream(CHAT, h.chatBody(h.uniq('stuck stream'), h.STREAM_WITH_USAGE),
            {'x-mock-hold': id});
        await s.nextEvent(5000);
        streams.push({s, id});
    }
    assert.equal(await proxy.stop(15000), 0, 'exit code');
    for (const {s, id} of streams) {
        const end = await s.rest(5000);
        assert.ok(!end.complete, 'a stream cut by the shutdown is not complete');
        env.mock.release(id);
    }
});

h.test('a second signal during the drain exits at once, the stream still held', async () => {
    /*
     * The main loop was left as soon as every worker stopped accepting, so a second SIGTERM or
     * SIGINT while requests drained went unanswered: the process waited out the whole
     * shutdown-timeout (here 120 s), although the operator asked it to stop now.
     */
    const proxy = await env.startProxy({args: ['--shutdown-timeout', '120']});
    const id = h.uniq('hold').replace(' ', '-');
    const s = await proxy.openStream(CHAT, h.chatBody(h.uniq('second signal'), h.STREAM_WITH_USAGE),
        {'x-mock-hold': id});
    try {
        await s.nextEvent(5000);
        proxy.proc.signalIt('SIGTERM');
        await h.waitFor(() => /SIGTERM received/.test(proxy.stderr), {what: 'the first signal logged'});
        await waitRefused(proxy.port);
        assert.ok(proxy.alive, 'draining: still running');
        proxy.proc.signalIt('SIGINT');
        assert.ok(await proxy.proc.waitExit(15000), 'exited after the second signal');
        assert.equal(proxy.proc.exitStatus(), 1, 'exit code');
        assert.match(proxy.stderr, /second signal: exiting without waiting/);
    } finally {
        env.mock.release(id);
        await proxy.kill();
    }
});

h.test('shutdown-timeout: a client still waiting for its answer gets an error in its API shape', async () => {
    /*
     * At shutdown-timeout every connection was closed as it stood: a JSON client whose upstream
     * call still ran met a reset connection (no status, no body), and the access log called it
     * 499, aborted, as if the client had hung up. The calls are now ended first, as failed
     * upstream calls: the client gets a 502 in its API's shape, and the log says 502.
     */
    const proxy = await env.startProxy({args: ['--shutdown-timeout', '0.5']});
    const id = h.uniq('held json').replace(' ', '-');
    const calls = env.mock.callCount(CHAT);
    const pending = proxy.post(CHAT, h.chatBody(h.uniq('cut json')), {'x-mock-hold': id});
    try {
        await env.mock.waitForCalls(calls + 1, CHAT);
        assert.equal(await proxy.stop(15000), 0, 'exit code');
        const r = await pending;
        assert.equal(r.status, 502, r.text);
        assert.equal(r.json.error.type, 'server_error', r.text);
        assert.match(r.json.error.message, /shutting down/);
        const line = proxy.accessLog().find((l) => l.id === r.headers['x-promptcache-request-id']);
        assert.ok(line, 'logged');
        assert.equal(line.status, 502);
        assert.equal(line.aborted, false);
    } finally {
        env.mock.release(id);
    }
});
