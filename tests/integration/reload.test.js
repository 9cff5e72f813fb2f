'use strict';
/*
 * SIGHUP: the log files are reopened (logrotate renames them, then signals:
 * no copytruncate needed), and the configuration is read again. Keys that are
 * safe at runtime (cache-ttl, log-level, ...) change at once - the TTL Redis
 * gives a new entry shows it; keys that need a restart are named in the log
 * and keep their running values; an invalid file is refused, every error is
 * logged, and the proxy keeps serving with what it ran before.
 */
const assert = require('node:assert/strict');
const {execFileSync} = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const path = require('node:path');
const h = require('./lib');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';

function writeConf(file, lines) {
    fs.writeFileSync(file, lines.join('\n') + '\n');
}

/* SIGHUP, then wait for a log line matching done; the log written since the signal. */
async function sighup(proxy, done, what) {
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => done.test(proxy.proc.output.slice(mark)), {what});
    return proxy.proc.output.slice(mark);
}

const readText = (file) => (fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '');

/* Send a malformed request straight to the socket; resolves once the proxy closed it. */
function sendGarbage(port) {
    return new Promise((resolve, reject) => {
        const s = net.connect(port, '127.0.0.1', () => s.end('NOT AN HTTP REQUEST\r\n\r\n'));
        s.on('data', () => {});
        s.once('error', reject);
        s.once('close', resolve);
    });
}

/* Make a request that stores a new entry; resolves to the TTL Redis gives it. */
async function ttlOfNewEntry(proxy) {
    const before = new Set(await env.redis.keys('pc:*:e:*'));
    const res = await proxy.post(CHAT, h.chatBody(h.uniq('reload ttl')));
    assert.equal(res.status, 200, res.text);
    /* stored before the answer was sent */
    const keys = (await env.redis.keys('pc:*:e:*')).filter((k) => !before.has(k));
    assert.equal(keys.length, 1, 'the new entry in Redis');
    return env.redis.command('TTL', keys[0]);
}

h.test('logrotate-style rename + SIGHUP: the new files get the lines', async () => {
    const dir = h.tmpDir('pc-rotate-');
    const logFile = path.join(dir, 'promptcache.log');
    const proxy = await env.startProxy({logFile});
    const accessLog = proxy.accessLogPath;
    await proxy.post(CHAT, h.chatBody(h.uniq('before rotation')));
    await proxy.waitAccessLog((l) => l.path === CHAT);

    fs.renameSync(logFile, `${logFile}.1`);
    fs.renameSync(accessLog, `${accessLog}.1`);
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /SIGHUP: log files reopened/.test(readText(logFile)),
        {what: 'the reopen line in the new daemon log'});
    const res = await proxy.post(CHAT, h.chatBody(h.uniq('after rotation')));
    assert.equal(res.status, 200);
    const line = await proxy.waitAccessLog((l) => l.id === res.headers['x-promptcache-request-id']);
    assert.equal(line.status, 200, 'the request after rotation is in the new access log');
    assert.equal(proxy.accessLog().length, 1, 'only the new request is in the new access log');
    const old = readText(`${accessLog}.1`).trim().split('\n');
    assert.equal(old.length, 1, 'the rotated access log kept the earlier line only');
    assert.match(readText(`${logFile}.1`), /listening on/, 'the rotated daemon log kept its lines');
    assert.ok(!/SIGHUP/.test(readText(`${logFile}.1`)), 'nothing after the rotation went to the old file');
    assert.equal(await proxy.stop(), 0);
    assert.match(readText(logFile), /stopped/, 'the shutdown lines land in the new file too');
});

h.test('a config edit + SIGHUP changes cache-ttl and log-level; restart-only keys are named', async () => {
    const conf = path.join(h.tmpDir('pc-reload-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 1000', 'log-level notice']);
    const proxy = await env.startProxy({config: conf, logLevel: null});
    const ttl1 = await ttlOfNewEntry(proxy);
    assert.ok(ttl1 > 900 && ttl1 <= 1000, `TTL ${ttl1} from cache-ttl 1000`);
    await sendGarbage(proxy.port);
    assert.ok(!/rejected request with 400/.test(proxy.proc.output), 'no debug lines at notice');

    writeConf(conf, ['cache-ttl 50', 'log-level debug', 'max-connections 500', 'upstream-type vllm']);
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload: every worker runs the new configuration/.test(proxy.proc.output.slice(mark)),
        {what: 'every worker on the new configuration'});
    const out = proxy.proc.output.slice(mark);
    assert.match(out, /reload: applied cache-ttl 1000 -> 50, log-level notice -> debug/);
    assert.match(out, /reload: changed but only taken on restart \(running values kept\): max-connections, upstream-type/);

    for (let i = 0; i < 6; i++) {
        const ttl = await ttlOfNewEntry(proxy);
        assert.ok(ttl > 0 && ttl <= 50, `TTL ${ttl} after the reload (cache-ttl 50)`);
    }
    await sendGarbage(proxy.port);
    await h.waitFor(() => /D httpd: .*rejected request with 400/.test(proxy.proc.output.slice(mark)),
        {what: 'a debug line after log-level debug'});
    assert.equal(await proxy.stop(), 0);
});

h.test('semantic-threshold reloaded back to auto takes the embedder\'s own threshold again', async () => {
    /* It kept the number the process started with: the lookups and /stats went on with 0.5. */
    const conf = path.join(h.tmpDir('pc-reload-'), 'promptcache.conf');
    writeConf(conf, ['semantic yes', 'semantic-max-error off', 'semantic-threshold 0.5']);
    const proxy = await env.startProxy({config: conf});
    assert.equal((await proxy.stats()).semantic_threshold, 0.5);
    const reloaded = (lines) => {
        writeConf(conf, lines);
        return sighup(proxy, /reload: every worker runs the new configuration/, 'every worker on the new configuration');
    };
    await reloaded(['semantic yes', 'semantic-max-error off', 'semantic-threshold auto']);
    assert.equal((await proxy.stats()).semantic_threshold, 0.85, 'auto: the builtin embedder\'s threshold');
    await reloaded(['semantic yes', 'semantic-max-error off', 'semantic-threshold 0.95']);
    assert.equal((await proxy.stats()).semantic_threshold, 0.95);
    assert.equal(await proxy.stop(), 0);
});

h.test('an invalid edit is refused and logged while the proxy keeps serving', async () => {
    const conf = path.join(h.tmpDir('pc-reload-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 700']);
    const proxy = await env.startProxy({config: conf});
    writeConf(conf, ['cache-ttl soon', 'no-such-key 1', 'log-level loud']);
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload refused: 3 configuration errors/.test(proxy.proc.output.slice(mark)),
        {what: 'the refusal in the log'});
    const out = proxy.proc.output.slice(mark);
    for (const [line, key] of [[1, 'cache-ttl'], [2, 'no-such-key'], [3, 'log-level']])
        assert.ok(out.includes(`E reload: ${conf}:${line}: ${key}: `), `error for line ${line} in:\n${out}`);
    assert.ok(proxy.alive);
    const ttl = await ttlOfNewEntry(proxy);
    assert.ok(ttl > 600 && ttl <= 700, `TTL ${ttl}: the running cache-ttl 700 is kept`);

    /* a later valid edit is taken as usual, by every worker */
    writeConf(conf, ['cache-ttl 40']);
    const mark2 = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /reload: every worker runs the new configuration/.test(proxy.proc.output.slice(mark2)),
        {what: 'every worker on the valid edit'});
    assert.match(proxy.proc.output.slice(mark2), /reload: applied cache-ttl 700 -> 40/);
    for (let i = 0; i < 4; i++) {
        const t = await ttlOfNewEntry(proxy);
        assert.ok(t > 0 && t <= 40, `TTL ${t}`);
    }
    assert.equal(await proxy.stop(), 0);
});

h.test('a config file that became a FIFO is refused on reload; the proxy keeps serving and stops', async () => {
    /* A pipe read at start (/dev/stdin, <(...)) reads as empty the second time, and a FIFO with
     * no writer blocked the reload's open on the main thread, which then never saw SIGTERM. */
    const conf = path.join(h.tmpDir('pc-reload-fifo-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 700']);
    const proxy = await env.startProxy({config: conf});
    fs.unlinkSync(conf);
    execFileSync('mkfifo', [conf]);
    const out = await sighup(proxy, /reload refused: 1 configuration error/, 'the refusal in the log');
    assert.ok(out.includes(`E reload: ${conf}: not a regular file`), out);
    const ttl = await ttlOfNewEntry(proxy);
    assert.ok(ttl > 600 && ttl <= 700, `TTL ${ttl}: the running cache-ttl 700 is kept`);
    assert.equal(await proxy.stop(), 0);
});

h.test('a config file that is empty at the SIGHUP is refused; the tokens and TTL are kept', async () => {
    /* A tool that truncates the file and then writes it leaves it empty for a moment; a reload
     * then set every reloadable key to its default: metrics-token empty opened /metrics. */
    const conf = path.join(h.tmpDir('pc-reload-empty-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 700', 'metrics-token reload-metrics-secret']);
    const proxy = await env.startProxy({config: conf});
    assert.equal((await proxy.get('/metrics')).status, 401, 'metrics-token set');
    fs.writeFileSync(conf, '');
    const out = await sighup(proxy, /reload refused: 1 configuration error/, 'the refusal in the log');
    assert.ok(out.includes(`E reload: ${conf}: the file is empty`), out);
    assert.equal((await proxy.get('/metrics')).status, 401, 'metrics-token kept');
    const ttl = await ttlOfNewEntry(proxy);
    assert.ok(ttl > 600 && ttl <= 700, `TTL ${ttl}: the running cache-ttl 700 is kept`);
    /* a comment line is a file on purpose: the defaults are taken */
    fs.writeFileSync(conf, '# defaults\n');
    await sighup(proxy, /reload: every worker runs the new configuration/, 'every worker on the defaults');
    assert.equal((await proxy.get('/metrics')).status, 200, 'metrics-token back to its default (none)');
    assert.equal(await proxy.stop(), 0);
});

h.test('a price list that became a FIFO is refused on reload; the proxy keeps serving and stops', async () => {
    const prices = path.join(h.tmpDir('pc-reload-fifo-'), 'pricing.json');
    fs.copyFileSync(path.join(h.REPO, 'conf', 'pricing.json'), prices);
    const proxy = await env.startProxy({args: ['--pricing', prices]});
    fs.unlinkSync(prices);
    execFileSync('mkfifo', [prices]);
    const out = await sighup(proxy, /reload refused: 1 configuration error/, 'the refusal in the log');
    assert.ok(out.includes(`${prices}: not a regular file`), out);
    assert.equal((await proxy.post(CHAT, h.chatBody(h.uniq('after the refusal')))).status, 200);
    assert.equal(await proxy.stop(), 0);
});

h.test('SIGHUP re-reads secrets: a rotated admin-token file takes effect', async () => {
    const dir = h.tmpDir('pc-rotate-secret-');
    const file = path.join(dir, 'admin-token');
    fs.writeFileSync(file, 'first-token-0a1b\n', {mode: 0o600});
    const proxy = await env.startProxy({args: ['--admin-token-file', file]});
    const del = async (t) => (await h.request(proxy.url, {method: 'DELETE', path: '/admin/cache',
        headers: {authorization: `Bearer ${t}`}})).status;
    assert.equal(await del('first-token-0a1b'), 200);
    fs.writeFileSync(file, 'second-token-2c3d\n', {mode: 0o600});
    const mark = proxy.proc.output.length;
    proxy.proc.signalIt('SIGHUP');
    await h.waitFor(() => /every worker runs the new configuration/.test(proxy.proc.output.slice(mark)),
        {what: 'the reload to reach every worker'});
    assert.match(proxy.proc.output.slice(mark), /reload: applied admin-token \(secret\) changed/);
    assert.equal(await del('first-token-0a1b'), 401);
    assert.equal(await del('second-token-2c3d'), 200);
    assert.ok(!proxy.proc.output.includes('second-token'), 'the secret is not logged');
    assert.equal(await proxy.stop(), 0);
});

h.test('reloads under load: every request answered, snapshots freed, clean exit', async () => {
    const conf = path.join(h.tmpDir('pc-reload-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 100']);
    const proxy = await env.startProxy({config: conf, workers: 2});
    const RELOADS = 20;
    let stop = false;
    const statuses = [];
    const client = async () => {
        for (let i = 0; !stop && i < 400; i++) {
            const body = h.chatBody(i % 3 === 0 ? 'a repeated question under reloads' : h.uniq('under reloads'));
            statuses.push((await proxy.post(CHAT, body)).status);
        }
    };
    const clients = Array.from({length: 4}, client);
    const applied = () => (proxy.proc.output.match(/reload: applied cache-ttl/g) || []).length;
    for (let i = 1; i <= RELOADS; i++) {
        writeConf(conf, [`cache-ttl ${i % 2 ? 200 : 100}`]);
        proxy.proc.signalIt('SIGHUP');
        await h.waitFor(() => applied() >= i, {what: `reload ${i} applied`});
    }
    stop = true;
    await Promise.all(clients);
    assert.ok(statuses.length > 0);
    assert.deepEqual([...new Set(statuses)], [200], 'every request answered 200');
    assert.equal(await proxy.stop(), 0, 'a clean exit (no leak reported under SANITIZE=1)');
});

h.test('a SIGHUP during the start is a reload once the proxy runs, not its end', async () => {
    /* Until the main loop handled SIGHUP, the signal's default action ended the process: a
     * logrotate or systemctl reload while the proxy started (the price list, the embedder's
     * vectors) killed it. The line about the prices comes before the signals are set up. */
    const conf = path.join(h.tmpDir('pc-reload-start-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 1000', 'semantic yes', 'embedder builtin']);
    let signalled = null;
    const proxy = await env.startProxy({config: conf, onSpawn: (proc) => {
        signalled = (async () => {
            await h.waitFor(() => /N prices: /.test(proc.output), {what: 'the prices line'});
            writeConf(conf, ['cache-ttl 50', 'semantic yes', 'embedder builtin']);
            /* Until it listens: some land before the main loop handles SIGHUP. */
            do {
                proc.signalIt('SIGHUP');
                await new Promise((resolve) => setImmediate(resolve));
            } while (proc.alive && !/listening on/.test(proc.output));
        })();
    }});
    await signalled;
    await h.waitFor(() => /reload: applied cache-ttl 1000 -> 50/.test(proxy.proc.output),
        {what: 'the SIGHUP of the start applied'});
    await h.waitFor(() => /reload: every worker runs the new configuration/.test(proxy.proc.output),
        {what: 'every worker on the new configuration'});
    const ttl = await ttlOfNewEntry(proxy);
    assert.ok(ttl > 0 && ttl <= 50, `TTL ${ttl} after the reload (cache-ttl 50)`);
    assert.equal(await proxy.stop(), 0);
});

h.test('a storm of SIGHUPs through a shutdown: the SIGTERM is taken, exit 0', async () => {
    /* libevent called the handler once per signal caught, and each ran a whole reload: a burst
     * queued reloads for seconds, and the SIGTERM waited behind them (no exit in 20 s). Before
     * that, once the teardown freed the SIGHUP event, the signal's default action ended it. */
    const conf = path.join(h.tmpDir('pc-reload-stop-'), 'promptcache.conf');
    writeConf(conf, ['cache-ttl 700', 'semantic yes', 'embedder builtin']);
    const proxy = await env.startProxy({config: conf});
    assert.equal((await proxy.post(CHAT, h.chatBody(h.uniq('before the stop')))).status, 200);
    proxy.proc.signalIt('SIGTERM');
    /* One after the other until the process is gone: some land in the teardown. */
    const deadline = Date.now() + 20000;
    let sent = 0;
    while (proxy.alive && Date.now() < deadline) {
        proxy.proc.signalIt('SIGHUP');
        sent++;
        await new Promise((resolve) => setImmediate(resolve));
    }
    assert.ok(!proxy.alive, 'the proxy exits');
    assert.equal(proxy.proc.exitStatus(), 0, `exit status after ${sent} SIGHUPs:\n${proxy.proc.tail(20)}`);
});

