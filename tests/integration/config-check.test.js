'use strict';
/*
 * `promptcache -t [FILE] [--key value...]` checks a configuration and exits:
 * 0 when valid; otherwise non-zero with one "FILE:LINE: key: message" per
 * error in the file and "command line: --key: message" per bad option.
 */
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

function writeConf(lines) {
    const file = path.join(h.tmpDir('pc-conf-'), 'promptcache.conf');
    fs.writeFileSync(file, lines.join('\n') + '\n');
    return file;
}

const VALID = [
    '# a valid configuration',
    'listen 127.0.0.1:8080',
    'upstream http://127.0.0.1:9001',
    'upstream http://127.0.0.1:9002',
    'redis redis://127.0.0.1:6379/0',
    'cache-ttl 3600',
    'workers 2',
    'admin-token "a token with spaces"',
];

h.test('-t on a valid file exits 0', async () => {
    const r = await h.runCli(['-t', writeConf(VALID)]);
    assert.equal(r.code, 0, r.output);
});

h.test('-t with options only exits 0', async () => {
    const r = await h.runCli(['-t', '--upstream', 'http://127.0.0.1:9001', '--redis', 'redis://127.0.0.1:6379/0']);
    assert.equal(r.code, 0, r.output);
});

h.test('a config file and a tenant-names file saved with a UTF-8 byte order mark and CRLF are read', async () => {
    /* Windows editors start a UTF-8 file with EF BB BF: it was taken as part of the first key. */
    const dir = h.tmpDir('pc-conf-bom-');
    const file = path.join(dir, 'promptcache.conf'), names = path.join(dir, 'tenants');
    fs.writeFileSync(file, '\ufeffcache-ttl 3600\r\nlog-level info\r\n');
    fs.writeFileSync(names, '\ufeff0123456789abcdef team a\r\n');
    const r = await h.runCli(['-T', file, '--tenant-names', names]);
    assert.equal(r.code, 0, r.output);
    assert.match(r.stdout, new RegExp(`^cache-ttl 3600 +# ${file}:1$`, 'm'));
    assert.match(r.stdout, /^log-level info /m);
});

h.test('purge refuses an option where a value belongs, before it reaches Redis', async () => {
    /* "--namespace --dry-run" ran a real purge of namespace "--dry-run"; "--key --redis URL"
     * took the URL for a config file. */
    const port = await h.freePort();
    for (const args of [['--namespace', '--dry-run'], ['--model', '--all'], ['--key', '--redis']]) {
        const r = await h.runCli(['purge', ...args, '--redis', `redis://127.0.0.1:${port}/0`]);
        assert.equal(r.code, 2, r.output);
        assert.match(r.stderr, new RegExp(`^promptcache purge: ${args[0]} needs a value$`, 'm'));
    }
});

h.test('-t on the committed sample config exits 0', async () => {
    const sample = path.join(h.REPO, 'conf', 'promptcache.conf');
    assert.ok(fs.existsSync(sample), 'conf/promptcache.conf exists');
    const r = await h.runCli(['-t', sample]);
    assert.equal(r.code, 0, r.output);
});

h.test('-t on a bad file reports FILE:LINE: key: for each error', async () => {
    const errors = {
        3: ['workers', 'workers many'],
        5: ['cache-ttl', 'cache-ttl -5'],
        6: ['no-such-key', 'no-such-key 1'],
        7: ['semantic-threshold', 'semantic-threshold 2.5'],
        9: ['upstream-type', 'upstream-type carrier-pigeon'],
        10: ['listen', 'listen not-a-host-port'],
    };
    const lines = ['# line 1', 'upstream http://127.0.0.1:9001'];
    for (let n = 3; n <= 10; n++)
        lines.push(errors[n] ? errors[n][1] : `# fine line ${n}`);
    const file = writeConf(lines);
    const r = await h.runCli(['-t', file]);
    assert.notEqual(r.code, 0, 'a bad config is rejected');
    for (const [line, [key]] of Object.entries(errors))
        assert.ok(r.output.includes(`${file}:${line}: ${key}: `), `message for line ${line} (${key}) in:\n${r.output}`);
    const reported = r.output.split('\n').filter((l) => /^\d+: /.test(l.slice(file.length + 1)) && l.startsWith(file));
    assert.equal(reported.length, Object.keys(errors).length, `one message per error:\n${r.output}`);
});

h.test('-t reports bad command-line options', async () => {
    const r = await h.runCli(['-t', writeConf(VALID), '--workers', 'lots', '--cache-ttl', 'soon']);
    assert.notEqual(r.code, 0);
    assert.match(r.output, /command line: --workers: /);
    assert.match(r.output, /command line: --cache-ttl: /);
});

h.test('-t on a missing file fails with a message', async () => {
    const r = await h.runCli(['-t', '/nonexistent/promptcache.conf']);
    assert.notEqual(r.code, 0);
    assert.match(r.output, /\/nonexistent\/promptcache\.conf/);
});

h.test('every key can come from PROMPTCACHE_<KEY>; -T names the variable', async () => {
    const env = {PROMPTCACHE_CACHE_TTL: '1234', PROMPTCACHE_UPSTREAM: 'http://127.0.0.1:9001,http://127.0.0.1:9002',
        PROMPTCACHE_SEMANTIC: 'no'};
    const r = await h.runCli(['-T', writeConf(VALID)], {env});
    assert.equal(r.code, 0, r.output);
    assert.match(r.stdout, /^cache-ttl 1234 +# environment PROMPTCACHE_CACHE_TTL$/m);
    assert.match(r.stdout, /^upstream http:\/\/127\.0\.0\.1:9002 +# environment PROMPTCACHE_UPSTREAM$/m);
    assert.match(r.stdout, /^semantic no +# environment PROMPTCACHE_SEMANTIC$/m);
    /* the command line wins over the environment */
    const c = await h.runCli(['-T', writeConf(VALID), '--cache-ttl', '99'], {env});
    assert.match(c.stdout, /^cache-ttl 99 +# command line$/m);
});

/*
 * A list key's line of the file ("upstream A B", "semantic-guards numbers negation") given as
 * its option: `--key value` takes what the file line takes, and the variable's commas. It was
 * one value ("URL contains a space", "unknown guard \"numbers negation\""), so --help's
 * default of cache-key-headers, pasted with a header added, was refused.
 */
h.test('a list key takes several values in one option, as on one line of the file', async () => {
    const r = await h.runCli(['-T', '--upstream', 'http://127.0.0.1:9001 http://127.0.0.1:9002',
        '--semantic-guards', 'numbers,negation', '--cache-key-headers',
        'anthropic-version anthropic-beta openai-beta openai-organization openai-project x-team',
        '--shared-namespaces=docs, faq', '--cors-origins', '']);
    assert.equal(r.code, 0, r.output);
    const values = (key) => [...r.stdout.matchAll(new RegExp(`^${key} (\\S+) +# command line$`, 'gm'))]
        .map((m) => m[1]);
    assert.deepEqual(values('upstream'), ['http://127.0.0.1:9001', 'http://127.0.0.1:9002']);
    assert.deepEqual(values('semantic-guards'), ['numbers', 'negation']);
    assert.deepEqual(values('cache-key-headers'), ['anthropic-version', 'anthropic-beta', 'openai-beta',
        'openai-organization', 'openai-project', 'x-team']);
    assert.deepEqual(values('shared-namespaces'), ['docs', 'faq']);
    assert.deepEqual(values('cors-origins'), ['""'], '"" still empties a list');
    /* repeated, each option adds its values */
    const rep = await h.runCli(['-T', '--upstream', 'http://127.0.0.1:9001', '--upstream', 'http://127.0.0.1:9002 http://127.0.0.1:9003']);
    assert.equal(rep.code, 0, rep.output);
    assert.equal((rep.stdout.match(/^upstream http:\/\/127\.0\.0\.1:900[123] +# command line$/gm) || []).length, 3);
    /* a value that is not a list still takes one value */
    const one = await h.runCli(['-t', '--upstream-type', 'openai vllm']);
    assert.notEqual(one.code, 0);
});

h.test('-t rejects a PROMPTCACHE_ variable that is no key, and suggests the closest', async () => {
    const r = await h.runCli(['-t', writeConf(VALID)], {env: {PROMPTCACHE_CACHE_TL: '60'}});
    assert.equal(r.code, 1, r.output);
    assert.match(r.stderr, /environment: PROMPTCACHE_CACHE_TL: not a configuration variable; did you mean PROMPTCACHE_CACHE_TTL\?/);
    /* a subcommand or the proxy itself only warns */
    const d = await h.runCli(['-T', writeConf(VALID)], {env: {PROMPTCACHE_CACHE_TL: '60'}});
    assert.equal(d.code, 0, d.output);
    assert.match(d.stderr, /warning: environment: PROMPTCACHE_CACHE_TL: /);
});

h.test('a misspelt key in the file or an option is named with the closest real one', async () => {
    const file = writeConf([...VALID, 'redis-timout 20']);
    const r = await h.runCli(['-t', file, '--semantic-treshold', '0.9']);
    assert.notEqual(r.code, 0);
    assert.match(r.output, new RegExp(`${file}:9: redis-timout: unknown key; did you mean redis-timeout\\?`));
    assert.match(r.output, /command line: --semantic-treshold: unknown option; did you mean --semantic-threshold\?/);
});

h.test('-t fails on a log file a start could not open, and creates none', async () => {
    /*
     * -t said "configuration OK" for a log-file in a directory that does not exist, and the
     * start then failed on it ("cannot open log file"): systemd's ExecStartPre=promptcache -t
     * let the unit start and fail. -t now opens the files as a start would, writing nothing.
     */
    const dir = h.tmpDir('pc-logcheck-');
    const bad = await h.runCli(['-t', '--log-file', path.join(dir, 'missing', 'promptcache.log'),
        '--access-log', dir]);
    assert.equal(bad.code, 1, bad.output);
    assert.match(bad.output, /log-file \S+\/missing\/promptcache\.log: cannot open for appending: No such file or directory/);
    assert.match(bad.output, /access-log \S+: cannot open for appending: Is a directory/);
    assert.match(bad.output, /2 configuration errors/);
    const good = await h.runCli(['-t', '--log-file', path.join(dir, 'promptcache.log'),
        '--access-log', path.join(dir, 'access.log')]);
    assert.equal(good.code, 0, good.output);
    assert.deepEqual(fs.readdirSync(dir), [], 'no file created by the check');
});

h.test('a start that cannot open a log names which one', async () => {
    /* Both said "cannot open log file PATH": an access log was reported as the log file. */
    const r = await h.runCli(['--listen', '127.0.0.1:0', '--cache', 'no', '--access-log', '/nonexistent/access.log']);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, /cannot open access-log \/nonexistent\/access\.log: No such file or directory/);
});

h.test('a log-file that is a FIFO nobody reads fails the start and -t at once', async () => {
    /*
     * open(2) of a FIFO for writing waits for a reader: the start hung there for good, before
     * its first log line, with nothing said (and -t called it OK). It is opened non-blocking.
     */
    const {spawnSync} = require('node:child_process');
    const fifo = path.join(h.tmpDir('pc-fifo-'), 'log.fifo');
    assert.equal(spawnSync('mkfifo', [fifo]).status, 0, 'mkfifo');
    const start = await h.runCli(['--listen', '127.0.0.1:0', '--cache', 'no', '--log-file', fifo], {timeout: 10000});
    assert.equal(start.code, 1, start.output);
    assert.match(start.output, /cannot open log-file \S+log\.fifo: No such device or address \(a FIFO nobody reads\)/);
    const check = await h.runCli(['-t', '--log-file', fifo], {timeout: 10000});
    assert.equal(check.code, 1, check.output);
    assert.match(check.output, /log-file \S+log\.fifo: cannot open for appending: No such device or address/);
});

h.test('listen on a unix socket is refused as such', async () => {
    /* "unix:/path" was read as host "unix" and port "/path": "port must be a number from 0 to 65535". */
    for (const v of ['unix:/run/promptcache.sock', '/run/promptcache.sock']) {
        const r = await h.runCli(['-t', '--listen', v]);
        assert.equal(r.code, 1, r.output);
        assert.match(r.output, /--listen: unix sockets are not supported: expected HOST:PORT/);
    }
});

h.test('prefix-kv-memory too small for one token of prefix-kv-model is refused, not replaced', async () => {
    /* It fell back to the 500000-token default without a word. */
    const r = await h.runCli(['-t', '--prefix-kv-model', 'llama-3.1-8b', '--prefix-kv-memory', '0.0000001']);
    assert.equal(r.code, 1, r.output);
    assert.match(r.output, /--prefix-kv-memory: 1e-07 GiB holds no token of llama-3\.1-8b \(131072 bytes each\)/);
    for (const extra of [['--prefix-kv-memory', '10'], ['--prefix-kv-memory', '0.0000001', '--prefix-capacity', '5000']]) {
        const ok = await h.runCli(['-t', '--prefix-kv-model', 'llama-3.1-8b', ...extra]);
        assert.equal(ok.code, 0, ok.output);
    }
});
