'use strict';
/*
 * The promises of Dockerfile, .dockerignore and docker-compose.yml, checked
 * without a Docker engine (there is none here, so no image is built or run):
 * health checks on every service with a command its image has, depends_on
 * with a health condition, Redis with maxmemory and an LRU eviction policy,
 * a stop grace period longer than the proxy's effective shutdown-timeout
 * (computed by the binary itself from the image's config and the service's
 * command, which must also pass -t), no secret written in the files, ports
 * published on 127.0.0.1 only, the vllm profile, a non-root runtime user,
 * every file the Dockerfile copies present and not excluded from the build
 * context, the runtime stage's packages providing every library the binary
 * links, and the build stage's the Makefile's build dependencies. Where a
 * compose implementation is installed, `config` must accept the file.
 */
const assert = require('node:assert/strict');
const {execFileSync, spawnSync} = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const h = require('./lib');
const yaml = require('./lib/yaml-lite');

const REPO = h.REPO;
const read = (f) => fs.readFileSync(path.join(REPO, f), 'utf8');
const composeRaw = yaml.parse(read('docker-compose.yml'));
const compose = yaml.interpolate(composeRaw); /* as compose sees it with nothing set */
const services = compose.services;
const PROXY_SERVICES = Object.keys(services).filter((n) => /^promptcache/.test(n));

/* ---- Dockerfile --------------------------------------------------------- */

/* Instructions with line continuations joined: [{op, args, line}], grouped by stage. */
function dockerfileStages() {
    const text = read('Dockerfile').replace(/\\\n/g, ' ');
    const stages = [];
    for (const l of text.split('\n')) {
        const line = l.trim();
        if (line === '' || line.startsWith('#'))
            continue;
        const m = /^(\w+)\s+(.*)$/.exec(line);
        assert.ok(m, `Dockerfile line: ${line}`);
        const ins = {op: m[1].toUpperCase(), args: m[2]};
        if (ins.op === 'FROM')
            stages.push({from: ins.args, ins: []});
        else
            stages[stages.length - 1].ins.push(ins);
    }
    return stages;
}

const stages = dockerfileStages();
const runtime = stages[stages.length - 1];
const buildStage = stages[0];

/* The packages an apt-get install in a stage names. */
function aptPackages(stage) {
    const run = stage.ins.filter((i) => i.op === 'RUN' && /apt-get install/.test(i.args)).map((i) => i.args).join(' ');
    const after = run.split(/apt-get install/)[1] || '';
    return after.split('&&')[0].split(/\s+/).filter((w) => w && !w.startsWith('-'));
}

/* COPY sources from the build context (not --from): [{src, dest}]. */
function contextCopies() {
    const out = [];
    for (const st of stages)
        for (const i of st.ins.filter((x) => x.op === 'COPY' || x.op === 'ADD')) {
            const words = i.args.split(/\s+/);
            if (words.some((w) => w.startsWith('--from')))
                continue;
            const files = words.filter((w) => !w.startsWith('--'));
            const dest = files.pop();
            for (const src of files)
                out.push({src, dest});
        }
    return out;
}

/* .dockerignore patterns as regexps over paths relative to the context. */
function ignoreRules() {
    return read('.dockerignore').split('\n').map((l) => l.trim()).filter((l) => l && !l.startsWith('#'))
        .map((p) => {
            const body = p.replace(/\/$/, '').replace(/[.+^$()|{}]/g, '\\$&')
                .replace(/\*\*\//g, '\0').replace(/\*/g, '[^/]*').replace(/\0/g, '(?:.*/)?');
            return {pattern: p, re: new RegExp(`^${body}(?:/.*)?$`)};
        });
}

h.test('Dockerfile: both stages on debian:12-slim, the build made by the Makefile', () => {
    assert.equal(stages.length, 2, 'a build stage and a runtime stage');
    for (const st of stages)
        assert.match(st.from, /^debian:12-slim\b/);
    assert.ok(buildStage.ins.some((i) => i.op === 'RUN' && /\bmake\b.*\ball\b/.test(i.args)), 'make all');
    const makefile = read('Makefile').replace(/\\\n/g, ' ');
    const debBuild = /^DEB_BUILD\s*:=\s*(.*)$/m.exec(makefile)[1].split(/\s+/).filter(Boolean);
    const installed = aptPackages(buildStage);
    for (const p of debBuild.filter((x) => x !== 'redis-server'))
        assert.ok(installed.includes(p), `build stage installs ${p} (Makefile DEB_BUILD)`);
});

h.test('Dockerfile: the runtime user is not root', () => {
    const users = runtime.ins.filter((i) => i.op === 'USER').map((i) => i.args.trim());
    assert.ok(users.length > 0, 'the runtime stage sets USER');
    const user = users[users.length - 1].split(':')[0];
    assert.ok(!['root', '0'].includes(user), `USER ${user}`);
    const entry = runtime.ins.filter((i) => i.op === 'ENTRYPOINT' || i.op === 'CMD');
    assert.ok(entry.length > 0, 'the image says what to run');
});

h.test('Dockerfile: the health check uses the binary the image has', () => {
    const hc = runtime.ins.find((i) => i.op === 'HEALTHCHECK');
    assert.ok(hc, 'HEALTHCHECK in the runtime stage');
    assert.match(hc.args, /CMD \["promptcache", "--healthcheck", "http:\/\/127\.0\.0\.1:8080\/healthz"\]/);
    assert.ok(runtime.ins.some((i) => i.op === 'COPY' && /--from=build .*build\/promptcache \/usr\/local\/bin\/promptcache/.test(i.args)),
        'promptcache is on the PATH of the image');
    const pricing = runtime.ins.find((i) => i.op === 'COPY' && /conf\/pricing\.json/.test(i.args));
    assert.ok(pricing, 'the pricing file is in the image');
    /* The maintained list, where the binary looks first (../share/promptcache/ from /usr/local/bin). */
    assert.ok(buildStage.ins.some((i) => i.op === 'RUN' && /\bmake prices\b/.test(i.args)), 'make prices');
    assert.ok(runtime.ins.some((i) => i.op === 'COPY' &&
        /--from=build \/src\/build\/prices\.json \/usr\/local\/share\/promptcache\/prices\.json/.test(i.args)),
    'the maintained price list is in the image, next to the binary\'s share folder');
});

h.test('Dockerfile: every copied file exists and is in the build context', () => {
    const rules = ignoreRules();
    const copies = contextCopies();
    assert.ok(copies.length >= 5);
    for (const {src} of copies) {
        assert.ok(fs.existsSync(path.join(REPO, src)), `${src} exists`);
        const hit = rules.find((r) => r.re.test(src.replace(/\/$/, '')));
        assert.ok(!hit, `${src} is excluded by .dockerignore (${hit && hit.pattern})`);
    }
    for (const must of ['build/promptcache', '.git', 'tests/clients/node_modules/x'])
        assert.ok(rules.some((r) => r.re.test(must)), `.dockerignore keeps ${must} out of the context`);
});

h.test('Dockerfile: the runtime packages provide every library the binary links', (t) => {
    const bin = h.proxyBin();
    const have = (cmd) => spawnSync('sh', ['-c', `command -v ${cmd}`]).status === 0;
    if (!['ldd', 'dpkg', 'apt-cache'].every(have))
        return t.skip('ldd, dpkg or apt-cache missing');
    const linked = execFileSync('ldd', [bin], {encoding: 'utf8'});
    if (/lib(asan|ubsan)/.test(linked))
        return t.skip('a SANITIZE=1 build: the image builds the plain one');
    const libs = linked.split('\n')
        .map((l) => /=>\s+(\S+)/.exec(l)).filter(Boolean).map((m) => fs.realpathSync(m[1]));
    /* One dpkg for all of them (one each took seconds): "pkg[:arch][, pkg...]: /path" lines,
     * exit status 1 if some path has no package. */
    const owners = new Set();
    const r = spawnSync('dpkg', ['-S', ...libs], {encoding: 'utf8'});
    for (const line of r.stdout.split('\n'))
        if (line.includes(': /') && !line.startsWith('diversion '))
            owners.add(line.split(':')[0]);

    const pkgs = aptPackages(runtime);
    const deps = spawnSync('apt-cache', ['depends', '--recurse', '--no-recommends', '--no-suggests',
        '--no-conflicts', '--no-breaks', '--no-replaces', '--no-enhances', '--no-pre-depends', ...pkgs],
    {encoding: 'utf8', maxBuffer: 64 * 1024 * 1024});
    if (deps.status !== 0) /* no package lists on this machine (apt-get update never ran) */
        return t.skip(`apt-cache depends: ${deps.stderr.trim().split('\n')[0]}`);
    const closure = deps.stdout.split('\n')
        .map((l) => l.replace(/^\s*(\|?Depends|PreDepends):\s*/, '').trim().replace(/[<>]/g, '').split(':')[0])
        .filter(Boolean);
    const provided = new Set([...pkgs, ...closure]);
    assert.ok(owners.size >= 5, `owners of the linked libraries: ${[...owners]}`);
    for (const o of owners)
        assert.ok(provided.has(o), `${o} (a linked library's package) comes with the runtime packages ${pkgs}`);
});

/* ---- docker-compose.yml --------------------------------------------------- */

h.test('compose: every service has a health check its image can run', () => {
    const tools = {'redis-cli': /^redis:/, promptcache: /^promptcache/, python3: /^vllm\/vllm-openai:/};
    for (const [name, s] of Object.entries(services)) {
        assert.ok(s.healthcheck && Array.isArray(s.healthcheck.test), `${name} has a healthcheck`);
        const [kind, cmd] = s.healthcheck.test;
        assert.equal(kind, 'CMD', `${name}: exec form`);
        assert.ok(tools[cmd], `${name}: health check command ${cmd} is a known one`);
        assert.match(s.image, tools[cmd], `${name}: ${cmd} is in its image ${s.image}`);
    }
});

h.test('compose: depends_on waits for healthy services', () => {
    for (const name of PROXY_SERVICES) {
        const deps = services[name].depends_on;
        assert.ok(deps && deps.redis, `${name} depends on redis`);
        for (const [dep, how] of Object.entries(deps)) {
            assert.equal(how.condition, 'service_healthy', `${name} -> ${dep}`);
            assert.ok(services[dep].healthcheck, `${dep} has the health check ${name} waits for`);
        }
    }
});

h.test('compose: Redis has maxmemory and an LRU eviction policy, and no published port', () => {
    const cmd = services.redis.command;
    const arg = (flag) => cmd[cmd.indexOf(flag) + 1];
    assert.ok(cmd.includes('--maxmemory'), 'maxmemory set');
    assert.match(arg('--maxmemory'), /^\d+(?:[kmg]b?)?$/i);
    assert.ok(['volatile-lru', 'allkeys-lru'].includes(arg('--maxmemory-policy')), `policy ${arg('--maxmemory-policy')}`);
    assert.equal(services.redis.ports, undefined, 'Redis is reachable from the compose network only');
});

/* "30s", "1m30s", "90" -> seconds. */
function durationSeconds(d) {
    const m = /^(?:(\d+)h)?(?:(\d+)m(?!s))?(?:(\d+(?:\.\d+)?)s?)?$/.exec(String(d));
    assert.ok(m, `duration ${d}`);
    return (Number(m[1] || 0) * 3600) + (Number(m[2] || 0) * 60) + Number(m[3] || 0);
}

/* The repository file the image holds at an absolute container path (Dockerfile COPY). */
function imageFile(containerPath) {
    const c = contextCopies().find((x) => x.dest === containerPath);
    assert.ok(c, `the Dockerfile copies something to ${containerPath}`);
    return path.join(REPO, c.src);
}

h.test('compose: each proxy\'s command is a valid config, and its grace period outlasts shutdown-timeout', async () => {
    for (const name of PROXY_SERVICES) {
        const s = services[name];
        const [confPath, ...opts] = s.command;
        const r = await h.runCli(['-T', imageFile(confPath), ...opts]);
        assert.equal(r.code, 0, `${name}: ${r.output}`);
        const line = r.stdout.split('\n').find((l) => l.startsWith('shutdown-timeout '));
        const shutdown = Number(line.split(/\s+/)[1]);
        assert.ok(s.stop_grace_period, `${name} sets stop_grace_period`);
        assert.ok(durationSeconds(s.stop_grace_period) > shutdown,
            `${name}: stop_grace_period ${s.stop_grace_period} > shutdown-timeout ${shutdown}`);
        const listen = r.stdout.split('\n').find((l) => l.startsWith('listen '));
        assert.match(listen, /^listen 0\.0\.0\.0:8080 /, `${name} listens on the container port`);
    }
});

h.test('compose: no secret is written in the files', () => {
    const SECRET_OPTS = /^--(upstream-key|admin-token|redis-password)(=|$)/;
    for (const [name, s] of Object.entries(composeRaw.services)) {
        for (const [k, v] of Object.entries(s.environment || {}))
            if (/KEY|TOKEN|PASSWORD|SECRET/.test(k))
                assert.match(String(v), /^\$\{[A-Z0-9_]+(:-)?\}$/, `${name}: ${k} comes from the environment, with no default`);
        for (const a of [].concat(s.command || []))
            assert.ok(!SECRET_OPTS.test(a), `${name}: no secret option on the command line (${a})`);
        for (const a of [].concat(s.command || []))
            assert.ok(!/:\/\/[^/@\s]*:[^/@\s]+@/.test(a), `${name}: no password in a URL (${a})`);
    }
    for (const f of ['docker-compose.yml', 'Dockerfile', 'conf/container.conf'])
        assert.ok(!/\b(sk-[A-Za-z0-9_-]{16,}|hf_[A-Za-z0-9]{16,})/.test(read(f)), `no API key in ${f}`);
});

h.test('compose: published ports are bound to 127.0.0.1', () => {
    for (const [name, s] of Object.entries(services))
        for (const p of s.ports || [])
            assert.match(String(p), /^127\.0\.0\.1:\d+:\d+$/, `${name} publishes ${p}`);
    assert.ok(services.promptcache.ports.length === 1, 'the proxy is published (on loopback)');
});

h.test('compose: the vllm profile runs vLLM with prefix caching on a GPU behind a proxy', () => {
    const inProfile = Object.entries(services).filter(([, s]) => (s.profiles || []).includes('vllm'));
    const vllm = inProfile.find(([, s]) => /^vllm\/vllm-openai:/.test(s.image));
    assert.ok(vllm, 'a vllm/vllm-openai service in the vllm profile');
    const [vname, v] = vllm;
    assert.ok(v.command.includes('--enable-prefix-caching'));
    const devices = v.deploy.resources.reservations.devices;
    assert.ok(devices.some((d) => d.driver === 'nvidia' && d.capabilities.includes('gpu')), 'GPU reservation');
    const proxy = inProfile.find(([, s]) => s.command && s.command.includes('--upstream-type'));
    assert.ok(proxy, 'a proxy in the same profile');
    const cmd = proxy[1].command;
    assert.equal(cmd[cmd.indexOf('--upstream-type') + 1], 'vllm');
    assert.equal(cmd[cmd.indexOf('--upstream') + 1], `http://${vname}:8000`);
    assert.ok(proxy[1].depends_on[vname], 'the proxy waits for vLLM');
    assert.equal(services.promptcache.profiles, undefined, 'the default proxy runs without a profile');
});

h.test('compose: the compose implementation accepts the file (where one is installed)', (t) => {
    const candidates = [['docker', ['compose']], ['docker-compose', []]];
    const found = candidates.find(([cmd, pre]) =>
        spawnSync(cmd, [...pre, 'version'], {encoding: 'utf8'}).status === 0);
    if (!found)
        return t.skip('no docker compose or docker-compose here');
    const [cmd, pre] = found;
    const run = (args) => spawnSync(cmd, [...pre, ...args], {cwd: REPO, encoding: 'utf8'});
    const quiet = run(['config', '-q']);
    assert.equal(quiet.status, 0, `${cmd} config: ${quiet.stderr}`);
    const withProfile = run(['--profile', 'vllm', 'config', '--services']);
    assert.equal(withProfile.status, 0, withProfile.stderr);
    for (const s of Object.keys(services))
        assert.ok(withProfile.stdout.split('\n').includes(s), `${s} in ${withProfile.stdout}`);
});

h.test('conf/container.conf passes -t', async () => {
    const r = await h.runCli(['-t', path.join(REPO, 'conf', 'container.conf')]);
    assert.equal(r.code, 0, r.output);
});
