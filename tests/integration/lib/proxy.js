'use strict';
/*
 * proxy.js - the promptcache binary under test: start it, learn its port from
 * the "listening on HOST:PORT" log line, wait for /healthz, talk to it, read
 * its access log, stop it. Also one-shot runs of the CLI (-t, migrate).
 *
 * The binary is process.env.PROMPTCACHE_BIN, or build/promptcache in the
 * repository. A missing binary is an error, never a skipped test.
 */
const fs = require('node:fs');
const path = require('node:path');
const {spawnTracked, tmpDir} = require('./procs');
const {waitFor, withDeadline} = require('./wait');
const {request, openStream, beginRequest} = require('./http');

const REPO = path.resolve(__dirname, '..', '..', '..');
const START_TIMEOUT = 15000;
const DEFAULT_KEY = 'sk-test-default-credential';

function proxyBin() {
    return process.env.PROMPTCACHE_BIN || path.join(REPO, 'build', 'promptcache');
}

function requireBin() {
    const bin = proxyBin();
    if (!fs.existsSync(bin))
        throw Object.assign(new Error(`promptcache binary not found at ${bin}: build it with ` +
            '`make` (or set PROMPTCACHE_BIN to its path)'), {code: 'PC_NO_BINARY'});
    return bin;
}

/* Credential headers the tests send unless they choose their own. */
function defaultCredentials(reqPath) {
    return reqPath.startsWith('/v1/messages')
        ? {'x-api-key': DEFAULT_KEY, 'anthropic-version': '2023-06-01'}
        : {authorization: `Bearer ${DEFAULT_KEY}`};
}

const CREDENTIAL_HEADERS = ['authorization', 'x-api-key', 'api-key'];

/* headers plus the default credential, unless headers name a credential (even as undefined). */
function withCredentials(reqPath, headers = {}) {
    const names = Object.keys(headers).map((k) => k.toLowerCase());
    if (names.some((k) => CREDENTIAL_HEADERS.includes(k)))
        return headers;
    return {...defaultCredentials(reqPath), ...headers};
}

/*
 * Resolves with the port from the "listening on 127.0.0.1:PORT" line, in the
 * process's output or, with logFile, in that file.
 */
function listeningPort(proc, logFile) {
    const re = /listening on 127\.0\.0\.1:(\d+)/;
    const text = () => (logFile ? (fs.existsSync(logFile) ? fs.readFileSync(logFile, 'utf8') : '') : proc.output);
    return withDeadline(new Promise((resolve, reject) => {
        let timer = null;
        const check = () => {
            const m = re.exec(text());
            if (m) {
                clearInterval(timer);
                resolve(Number(m[1]));
            }
        };
        proc.onOutput = check;
        if (logFile)
            timer = setInterval(check, 20);
        proc.exited.then(() => clearInterval(timer));
        check();
        proc.exited.then(() => reject(new Error(
            `promptcache exited with ${proc.exitStatus()} before listening:\n${proc.tail(30)}`)));
    }), START_TIMEOUT, 'promptcache to log "listening on 127.0.0.1:PORT"');
}

function upstreamArgs(upstream) {
    return [].concat(upstream).flatMap((u) => ['--upstream', u]);
}

/*
 * Start promptcache. opts: mock (in-process mock, the default upstream),
 * upstream (URL or list, overrides mock), redis (startRedis() handle or URL),
 * args (extra --key value options, applied last), workers, logLevel (null:
 * none on the command line), config (a config file, read first), env (extra
 * environment variables), logFile (the daemon log goes there), onSpawn
 * (called with the process as soon as it runs, before it listens), wrap (a
 * command line the binary and its arguments are appended to, run instead:
 * it must exec them, so that the process is promptcache's).
 */
async function startProxy(opts = {}) {
    const bin = requireBin();
    const dir = tmpDir('pc-proxy-');
    const accessLogPath = path.join(dir, 'access.log');
    const upstream = opts.upstream || opts.mock.url;
    const redisUrl = typeof opts.redis === 'string' ? opts.redis : opts.redis.url;
    const args = [
        ...(opts.config ? [opts.config] : []),
        '--listen', '127.0.0.1:0', ...upstreamArgs(upstream), '--redis', redisUrl,
        '--workers', String(opts.workers || 2),
        /* A loaded 2-core machine under ASan can take longer than the 50 ms default for a Redis
         * reply; tests about Redis timing set their own (args come last and win). */
        ...(opts.config ? [] : ['--redis-timeout', '1000']),
        ...(opts.logLevel === null ? [] : ['--log-level', opts.logLevel || 'info']),
        ...(opts.logFile ? ['--log-file', opts.logFile] : []),
        '--access-log', accessLogPath, ...(opts.args || []),
    ];
    const env = opts.env ? {...process.env, ...opts.env} : process.env;
    const cmd = opts.wrap ? [...opts.wrap, bin, ...args] : [bin, ...args];
    const proc = spawnTracked('promptcache', cmd[0], cmd.slice(1), {cwd: dir, env});
    if (opts.onSpawn)
        opts.onSpawn(proc);
    const port = await listeningPort(proc, opts.logFile);
    const proxy = new ProxyProcess(proc, port, accessLogPath);
    await waitFor(async () => (await proxy.get('/healthz')).status === 200,
        {timeout: START_TIMEOUT, what: 'GET /healthz == 200'});
    return proxy;
}

class ProxyProcess {
    constructor(proc, port, accessLogPath) {
        this.proc = proc;
        this.port = port;
        this.url = `http://127.0.0.1:${port}`;
        this.accessLogPath = accessLogPath;
    }

    get stderr() { return this.proc.stderr; }
    get pid() { return this.proc.pid; }
    get alive() { return this.proc.alive; }

    /* Any request; credentials are added for API paths unless given. */
    request(opts) {
        return request(this.url, {...opts, headers: withCredentials(opts.path, opts.headers)});
    }

    post(reqPath, body, headers) {
        return this.request({method: 'POST', path: reqPath, body, headers});
    }

    get(reqPath, headers = {}) {
        return request(this.url, {method: 'GET', path: reqPath, headers});
    }

    /* A POST whose answer is read incrementally (see StreamReader). */
    openStream(reqPath, body, headers) {
        return openStream(this.url, {method: 'POST', path: reqPath, body,
            headers: withCredentials(reqPath, headers)});
    }

    /* A POST the test may hang up on: {req, response} (see beginRequest). */
    begin(reqPath, body, headers) {
        return beginRequest(this.url, {method: 'POST', path: reqPath, body,
            headers: withCredentials(reqPath, headers)});
    }

    /* GET /stats as an object. */
    async stats() {
        const r = await this.get('/stats');
        if (r.status !== 200 || !r.json)
            throw new Error(`GET /stats: ${r.status} ${r.text.slice(0, 200)}`);
        return r.json;
    }

    /* Poll /readyz until it answers want (200: Redis connected). */
    waitReady(want = 200, timeout = 15000) {
        return waitFor(async () => (await this.get('/readyz')).status === want,
            {timeout, what: `GET /readyz == ${want}`});
    }

    /* Access log lines parsed as JSON (a line still being written is left out). */
    accessLog() {
        let text = '';
        try {
            text = fs.readFileSync(this.accessLogPath, 'utf8');
        } catch (e) {
            return [];
        }
        const lines = text.split('\n');
        lines.pop(); /* after the last newline: empty, or a partial line */
        return lines.filter((l) => l.trim() !== '').map((l) => JSON.parse(l));
    }

    accessLogText() {
        return fs.existsSync(this.accessLogPath) ? fs.readFileSync(this.accessLogPath, 'utf8') : '';
    }

    /* Wait until the access log has a line for which pred is true; returns it. */
    waitAccessLog(pred, timeout = 5000) {
        return waitFor(() => this.accessLog().find(pred), {timeout, what: 'access log line'});
    }

    /* SIGTERM and wait for the exit; resolves to the exit code (or signal name). */
    stop(graceMs = 15000) {
        return this.proc.terminate(graceMs);
    }

    kill() {
        return this.proc.kill();
    }
}

/* The schema version the build expects: the number of the last migrations/NNNN_*.lua. */
function latestSchemaVersion() {
    const nums = fs.readdirSync(path.join(REPO, 'migrations'))
        .map((f) => /^(\d+)_.*\.lua$/.exec(f)).filter(Boolean).map((m) => Number(m[1]));
    return Math.max(0, ...nums);
}

/* Run the binary once (e.g. -t, migrate); resolves to {code, stdout, stderr, output}. */
async function runCli(args, {timeout = 20000, env = null} = {}) {
    const proc = spawnTracked(`promptcache ${args[0]}`, requireBin(), args,
        {cwd: tmpDir('pc-cli-'), ...(env ? {env: {...process.env, ...env}} : {})});
    if (!(await proc.waitExit(timeout))) {
        await proc.kill();
        throw new Error(`promptcache ${args.join(' ')} did not exit within ${timeout} ms:\n${proc.tail(20)}`);
    }
    return {code: proc.exitStatus(), stdout: proc.stdout, stderr: proc.stderr, output: proc.output};
}

module.exports = {startProxy, runCli, proxyBin, latestSchemaVersion, withCredentials, DEFAULT_KEY, REPO};
