'use strict';
/*
 * conf/promptcache.service: what the unit promises (a dedicated user,
 * ExecReload sending SIGHUP, a stop timeout longer than shutdown-timeout,
 * an open-files limit for max-connections, secrets from an EnvironmentFile,
 * the hardening options) and, where systemd-analyze is installed, that
 * `systemd-analyze verify` accepts it (with ExecStart pointed at the binary
 * under test, since verify wants the executables to exist). The logrotate
 * file reloads instead of copytruncate.
 */
const assert = require('node:assert/strict');
const {spawnSync} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');

const UNIT = path.join(h.REPO, 'conf', 'promptcache.service');
const text = fs.readFileSync(UNIT, 'utf8');

/* {section: {key: [values]}} */
function parseUnit(t) {
    const out = {};
    let sec = null;
    for (const raw of t.split('\n')) {
        const line = raw.trim();
        if (!line || line.startsWith('#') || line.startsWith(';'))
            continue;
        const s = /^\[(\w+)\]$/.exec(line);
        if (s) {
            sec = out[s[1]] = out[s[1]] || {};
            continue;
        }
        const m = /^([A-Za-z]+)=(.*)$/.exec(line);
        assert.ok(m && sec, `unit line: ${line}`);
        (sec[m[1]] = sec[m[1]] || []).push(m[2]);
    }
    return out;
}

const unit = parseUnit(text);
const svc = unit.Service;
const one = (k) => (svc[k] || []).slice(-1)[0];

/* The effective value of a key with no config file (what the unit's default config has). */
async function effective(key) {
    const r = await h.runCli(['-T']);
    assert.equal(r.code, 0, r.output);
    return r.stdout.split('\n').find((l) => l.startsWith(`${key} `)).split(/\s+/)[1];
}

h.test('the unit runs as a dedicated user and reloads with SIGHUP', () => {
    assert.ok(one('User') && one('User') !== 'root', `User=${one('User')}`);
    assert.match(one('ExecReload'), /kill -(HUP|s HUP|SIGHUP) \$MAINPID/);
    assert.ok(['exec', 'simple'].includes(one('Type')), 'Type=notify only with sd_notify, which the proxy lacks');
    assert.match(one('ExecStartPre'), /promptcache -t /, 'an invalid config fails the start early');
    assert.ok(unit.Install && unit.Install.WantedBy, '[Install] WantedBy');
});

h.test('TimeoutStopSec outlasts shutdown-timeout; LimitNOFILE covers max-connections', async () => {
    assert.ok(Number(one('TimeoutStopSec')) > Number(await effective('shutdown-timeout')));
    /*
     * What the proxy asks for (server.c raise_fd_limit, doc/operations.md): max-connections
     * counts all workers together, a client and an upstream connection each, plus 1024. The
     * unit's comment said max-connections was per worker (workers x max-connections + 1024).
     */
    const max = Number(await effective('max-connections'));
    assert.ok(Number(one('LimitNOFILE')) >= 2 * max + 1024);
    assert.doesNotMatch(text, /max-connections is per worker/);
    assert.match(text, /2 x max-connections \+ 1024/);
    assert.match(fs.readFileSync(path.join(h.REPO, 'doc', 'operations.md'), 'utf8'),
        /`max-connections` counts \*\*all workers together\*\*.*about `2 × max-connections \+ 1024` open files/);
});

h.test('secrets come from an EnvironmentFile, not the command line', () => {
    assert.match(one('EnvironmentFile'), /^-?\/etc\/promptcache\//);
    for (const k of ['ExecStart', 'ExecStartPre'])
        assert.ok(!/--(upstream-key|admin-token|redis-password)\b(?!-file)/.test(one(k)), `${k} has no secret`);
});

h.test('hardening options are set', () => {
    const want = {NoNewPrivileges: 'yes', ProtectSystem: 'strict', PrivateTmp: 'yes', ProtectHome: 'yes'};
    for (const [k, v] of Object.entries(want))
        assert.equal(one(k), v, k);
    assert.ok((svc.ReadWritePaths || []).some((p) => p.includes('/var/log/promptcache')), 'logs writable');
    assert.equal(one('CapabilityBoundingSet'), '', 'no capabilities');
});

h.test('systemd-analyze verify accepts the unit (where installed)', (t) => {
    if (spawnSync('systemd-analyze', ['--version']).status !== 0)
        return t.skip('systemd-analyze is not installed');
    const dir = h.tmpDir('pc-unit-');
    const copy = path.join(dir, 'promptcache.service');
    fs.writeFileSync(copy, text.replaceAll('/usr/local/bin/promptcache', h.proxyBin()));
    const r = spawnSync('systemd-analyze', ['verify', copy], {encoding: 'utf8'});
    assert.equal(r.status, 0, r.stderr);
    assert.equal(r.stderr.trim(), '', `verify complains:\n${r.stderr}`);
});

h.test('logrotate reloads the proxy instead of copytruncate', () => {
    const lr = fs.readFileSync(path.join(h.REPO, 'conf', 'promptcache.logrotate'), 'utf8');
    const active = lr.split('\n').filter((l) => !l.trim().startsWith('#')).join('\n');
    assert.ok(!/copytruncate/.test(active));
    assert.match(active, /postrotate[\s\S]*systemctl reload promptcache/);
});
