'use strict';
/*
 * Secrets from files and the environment: upstream-key, admin-token and
 * redis-password reach the place they are for (the upstream's Authorization
 * header, the admin endpoint, Redis AUTH) when given as KEY-file or as
 * PROMPTCACHE_KEY[_FILE], and never show in the daemon log, the access log,
 * `promptcache -T` or /proc/PID/cmdline. A secret given on the command line
 * works, is warned about and is hidden from /proc/PID/cmdline once started.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const env = h.environment({proxy: false});
const CHAT = '/v1/chat/completions';

/* A secret file (mode 0600 unless given) holding text; returns its path. */
function secretFile(text, mode = 0o600) {
    const file = path.join(h.tmpDir('pc-secret-'), 'secret');
    fs.writeFileSync(file, text);
    fs.chmodSync(file, mode);
    return file;
}

const cmdline = (pid) => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');

/* Everything the proxy wrote or exposes that must never hold a secret. */
function assertNowhere(proxy, secret) {
    assert.ok(!proxy.proc.output.includes(secret), 'secret in the daemon log');
    assert.ok(!proxy.accessLogText().includes(secret), 'secret in the access log');
    assert.ok(!cmdline(proxy.pid).includes(secret), 'secret in /proc/PID/cmdline');
}

async function answeredWithKey(proxy, key) {
    const res = await proxy.post(CHAT, h.chatBody(h.uniq('secret key')), h.bearer('sk-client-own'));
    assert.equal(res.status, 200, res.text);
    assert.equal(env.mock.lastRequest(CHAT).headers.authorization, `Bearer ${key}`,
        'the upstream got the configured key, not the client credential');
}

h.test('upstream-key from a file reaches the upstream and nothing else', async () => {
    const key = 'sk-file-7f3a9c2e41';
    const file = secretFile(`${key}\n`);
    const proxy = await env.startProxy({args: ['--upstream-key-file', file]});
    await answeredWithKey(proxy, key);
    assertNowhere(proxy, key);
    assert.ok(!/warning/.test(proxy.proc.output), `no warning for a 0600 file:\n${proxy.proc.output}`);
    await proxy.stop();
});

h.test('upstream-key from PROMPTCACHE_UPSTREAM_KEY reaches the upstream and nothing else', async () => {
    const key = 'sk-env-5b8d1e0c77';
    const proxy = await env.startProxy({env: {PROMPTCACHE_UPSTREAM_KEY: key}});
    await answeredWithKey(proxy, key);
    assertNowhere(proxy, key);
    await proxy.stop();
});

h.test('admin-token from the environment (as a file) opens the admin endpoint', async () => {
    const token = 'adm-env-file-90c1f4';
    const file = secretFile(`${token}\n`, 0o640);
    const proxy = await env.startProxy({env: {PROMPTCACHE_ADMIN_TOKEN_FILE: file}});
    const del = (t) => h.request(proxy.url, {method: 'DELETE', path: '/admin/cache',
        headers: {authorization: `Bearer ${t}`}});
    assert.equal((await del('wrong')).status, 401);
    assert.equal((await del(token)).status, 200);
    assertNowhere(proxy, token);
    await h.waitFor(() => /W environment: PROMPTCACHE_ADMIN_TOKEN_FILE: .*\(mode 0640\)/.test(proxy.proc.output),
        {what: 'a group-readable secret file is warned about'});
    await proxy.stop();
});

h.test('a secret on the command line works, is warned about and hidden from /proc/PID/cmdline', async () => {
    const token = 'adm-cmdline-3e77a0';
    const proxy = await env.startProxy({args: ['--admin-token', token]});
    const res = await h.request(proxy.url, {method: 'DELETE', path: '/admin/cache',
        headers: {authorization: `Bearer ${token}`}});
    assert.equal(res.status, 200);
    await h.waitFor(() => /W command line: --admin-token: a secret on the command line/.test(proxy.proc.output),
        {what: 'the secret on the command line warned about'});
    assert.ok(cmdline(proxy.pid).includes('--admin-token'), 'the option itself is still there');
    assertNowhere(proxy, token);
    await proxy.stop();
});

h.test('a password in an upstream URL never shows in the log', async () => {
    /* The start's "upstream ..." line printed the URL whole, user:password@ included. */
    const u = new URL(env.mock.url);
    const proxy = await env.startProxy({upstream: `http://promptcache:upw5ecret@${u.host}/`});
    await h.waitFor(() => /N upstream \S+ \(http:\/\/127\.0\.0\.1:\d+, type /.test(proxy.proc.output),
        {what: 'the upstream named at start, host and path only'});
    assert.ok(!proxy.proc.output.includes('upw5ecret'), 'the password in the daemon log');
    await proxy.stop();
});

h.test('redis-password from a file and from the environment authenticates to Redis', async () => {
    const password = 'redis pw/with@odd:chars';
    const locked = await h.startRedis();
    try {
        await locked.command('CONFIG', 'SET', 'requirepass', password);
        const file = secretFile(`${password}\n`);
        for (const how of [{args: ['--redis-password-file', file]},
            {env: {PROMPTCACHE_REDIS_PASSWORD: password}}]) {
            const proxy = await env.startProxy({redis: locked.url, ...how});
            await proxy.waitReady();
            const body = h.chatBody(h.uniq('redis auth'));
            h.assertFromUpstream(await proxy.post(CHAT, body), env.mock);
            h.assertHit(await proxy.post(CHAT, body)); /* stored before the miss's answer was sent */
            assertNowhere(proxy, password);
            assertNowhere(proxy, encodeURIComponent(password));
            await proxy.stop();
        }
        const c = await locked.client();
        try {
            await c.command('AUTH', password);
            assert.ok((await c.command('KEYS', 'pc:*:e:*')).length >= 1, 'entries were stored');
        } finally {
            c.close();
        }
    } finally {
        await locked.stop();
    }
});

h.test('-T shows every key with its origin, secrets masked', async () => {
    const key = 'sk-dump-11aa22bb';
    const file = secretFile(`${key}\n`);
    const conf = path.join(h.tmpDir('pc-conf-'), 'promptcache.conf');
    fs.writeFileSync(conf, `# test\ncache-ttl 120\nupstream-key-file ${file}\n`);
    const r = await h.runCli(['-T', conf, '--log-level', 'info', '--admin-token-file', file]);
    assert.equal(r.code, 0, r.output);
    assert.ok(!r.output.includes(key), `secret in -T output:\n${r.output}`);
    const line = (k) => r.stdout.split('\n').find((l) => l.startsWith(`${k} `));
    assert.match(line('cache-ttl'), new RegExp(`^cache-ttl 120 +# ${conf}:2$`));
    assert.match(line('upstream-key'), new RegExp(`^upstream-key \\*\\*\\* +# ${conf}:3 \\(file ${file}\\)$`));
    assert.match(line('admin-token'), /^admin-token \*\*\* +# command line \(file /);
    assert.match(line('log-level'), /^log-level info +# command line$/);
    assert.match(line('listen'), /^listen 127\.0\.0\.1:8080 +# default$/);
    const keys = r.stdout.split('\n').filter((l) => /^[a-z]/.test(l)).map((l) => l.split(' ')[0]);
    const help = (await h.runCli(['--help'])).stdout;
    for (const k of new Set(keys))
        assert.ok(help.includes(`--${k} `), `${k} is a known key`);
    assert.ok(new Set(keys).size >= 30, 'every key is listed');
});

h.test('-T and -t fail on an unreadable secret file, naming it', async () => {
    for (const flag of ['-T', '-t']) {
        const r = await h.runCli([flag, '--upstream-key-file', '/nonexistent/key']);
        assert.notEqual(r.code, 0);
        assert.match(r.stderr, /command line: --upstream-key-file: cannot open \/nonexistent\/key: No such file/);
    }
    const empty = secretFile('\n');
    const r = await h.runCli(['-t', '--upstream-key-file', empty]);
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /is empty/);
});
