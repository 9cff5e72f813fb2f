'use strict';
/*
 * redis.js - a private redis-server per test file, and a tiny RESP client for
 * assertions on what the proxy stored.
 *
 * redis-server cannot listen on port 0, so a free port is found by binding
 * port 0 in node and closing it; if another process takes it in between,
 * redis-server fails with "Address already in use" and another port is tried.
 */
const fs = require('node:fs');
const net = require('node:net');
const {spawnTracked, tmpDir} = require('./procs');
const {waitFor} = require('./wait');

const START_TIMEOUT = 10000;

/* A port that was free a moment ago. */
function freePort() {
    return new Promise((resolve, reject) => {
        const srv = net.createServer();
        srv.once('error', reject);
        srv.listen(0, '127.0.0.1', () => {
            const {port} = srv.address();
            srv.close(() => resolve(port));
        });
    });
}

/* ------------------------------------------------------------------------ */
/* RESP                                                                      */

/* Parse one RESP value at buf[i]; null if the buffer does not hold all of it yet. */
function parseResp(buf, i) {
    const eol = buf.indexOf('\r\n', i);
    if (eol < 0)
        return null;
    const type = String.fromCharCode(buf[i]);
    const line = buf.toString('utf8', i + 1, eol);
    const next = eol + 2;
    switch (type) {
    case '+':
        return {value: line, next};
    case '-':
        return {value: Object.assign(new Error(line), {redisError: true}), next};
    case ':':
        return {value: Number(line), next};
    case '$': {
        const len = Number(line);
        if (len < 0)
            return {value: null, next};
        if (buf.length < next + len + 2)
            return null;
        return {value: buf.toString('utf8', next, next + len), next: next + len + 2};
    }
    case '*': {
        const n = Number(line);
        if (n < 0)
            return {value: null, next};
        const items = [];
        let at = next;
        for (let k = 0; k < n; k++) {
            const item = parseResp(buf, at);
            if (!item)
                return null;
            items.push(item.value);
            at = item.next;
        }
        return {value: items, next: at};
    }
    default:
        throw new Error(`RESP: unexpected type byte ${JSON.stringify(type)}`);
    }
}

function encodeCommand(args) {
    const parts = [`*${args.length}\r\n`];
    for (const a of args) {
        const s = String(a);
        parts.push(`$${Buffer.byteLength(s)}\r\n${s}\r\n`);
    }
    return parts.join('');
}

/* One connection; commands are pipelined and answered in order. */
class RespClient {
    static connect(port, host = '127.0.0.1', timeoutMs = 2000) {
        return new Promise((resolve, reject) => {
            const sock = net.connect({port, host});
            sock.setTimeout(timeoutMs, () => sock.destroy(new Error('redis: connect timeout')));
            sock.once('error', reject);
            sock.once('connect', () => {
                sock.setTimeout(0);
                sock.off('error', reject);
                resolve(new RespClient(sock));
            });
        });
    }

    constructor(sock) {
        this.sock = sock;
        this.buf = Buffer.alloc(0);
        this.pending = [];
        sock.on('data', (d) => this._onData(d));
        sock.on('error', (e) => this._failAll(e));
        sock.on('close', () => this._failAll(new Error('redis: connection closed')));
    }

    /* Send a command; resolves with its reply, rejects on an error reply. */
    command(...args) {
        return new Promise((resolve, reject) => {
            this.pending.push({resolve, reject});
            this.sock.write(encodeCommand(args));
        });
    }

    get(key) { return this.command('GET', key); }
    set(key, value, ...opts) { return this.command('SET', key, value, ...opts); }
    pttl(key) { return this.command('PTTL', key); }
    keys(pattern) { return this.command('KEYS', pattern); }

    close() {
        this.sock.end();
        this.sock.destroy();
    }

    _onData(d) {
        this.buf = Buffer.concat([this.buf, d]);
        let item;
        while (this.pending.length && (item = parseResp(this.buf, 0))) {
            this.buf = this.buf.subarray(item.next);
            const {resolve, reject} = this.pending.shift();
            if (item.value instanceof Error)
                reject(item.value);
            else
                resolve(item.value);
        }
    }

    _failAll(err) {
        for (const {reject} of this.pending.splice(0))
            reject(err);
    }
}

/* One command on a short-lived connection. */
async function redisCommand(port, ...args) {
    const c = await RespClient.connect(port);
    try {
        return await c.command(...args);
    } finally {
        c.close();
    }
}

async function ping(port) {
    return (await redisCommand(port, 'PING')) === 'PONG';
}

/* ------------------------------------------------------------------------ */
/* redis-server                                                              */

function spawnRedis(port, dir, extra = []) {
    return spawnTracked(`redis-server :${port}`, 'redis-server', [
        '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
        '--dir', dir, '--daemonize', 'no', ...extra,
    ]);
}

/* Wait for +PONG; fail early if the server exits (e.g. port taken). */
async function waitForPong(proc, port) {
    await waitFor(async () => {
        if (!proc.alive)
            throw Object.assign(new Error(`redis-server exited: ${proc.tail(5)}`), {exited: true});
        return ping(port);
    }, {timeout: START_TIMEOUT, what: `redis-server on port ${port} to answer PING`});
}

const addrInUse = (proc) => /address already in use/i.test(proc.output);

/* Start redis-server on port (or a free one), retrying when the port is taken. */
async function launch(port, dir, {retryPort, args = []}) {
    for (let attempt = 1; ; attempt++) {
        const p = port || (await freePort());
        const proc = spawnRedis(p, dir, args);
        try {
            await waitForPong(proc, p);
            return {proc, port: p};
        } catch (e) {
            await proc.kill();
            if (!addrInUse(proc) || attempt >= 5)
                throw e;
            if (!retryPort) /* same port wanted: it is in use for a moment, try again */
                await new Promise((r) => setTimeout(r, 200));
        }
    }
}

/* The state letter of /proc/PID/stat (R, S, T for stopped...), or null once gone. */
function procState(pid) {
    try {
        const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
        return stat.slice(stat.lastIndexOf(')') + 2).charAt(0);
    } catch (e) {
        return null;
    }
}

/*
 * A private redis-server on port (default: any free one): {port, url, dir,
 * stop(), kill(), restart(), freeze(), thaw(), command(...), client(),
 * keys()}. restart() brings it back on the same port, empty (nothing is
 * saved). freeze() resolves once the server is stopped (SIGSTOP is delivered
 * asynchronously: it may answer a few more commands after kill() returns),
 * thaw() continues it. args: more redis-server options (e.g. --replicaof
 * HOST PORT, --unixsocket PATH).
 */
async function startRedis({port = 0, args = []} = {}) {
    const dir = tmpDir('pc-redis-');
    const first = await launch(port, dir, {retryPort: !port, args});
    const r = {
        port: first.port,
        url: `redis://127.0.0.1:${first.port}/0`,
        dir,
        proc: first.proc,
        get alive() { return r.proc.alive; },
        stop: () => r.proc.terminate(),
        kill: () => r.proc.kill(),
        async restart() {
            if (r.proc.alive)
                await r.proc.terminate();
            r.proc = (await launch(r.port, dir, {retryPort: false, args})).proc;
        },
        async freeze() {
            process.kill(r.proc.pid, 'SIGSTOP');
            await waitFor(() => procState(r.proc.pid) === 'T', {interval: 5, what: 'redis-server stopped'});
        },
        thaw() {
            try {
                process.kill(r.proc.pid, 'SIGCONT');
            } catch (e) {
                /* gone: nothing to continue */
            }
        },
        command: (...args) => redisCommand(r.port, ...args),
        client: () => RespClient.connect(r.port),
        /* Keys matching pattern, sorted (KEYS is fine on a test server's few keys). */
        keys: async (pattern = '*') => (await redisCommand(r.port, 'KEYS', pattern)).sort(),
    };
    return r;
}

/* The key of the counters' hash of the hour holding ms (src/tally.c: pc:2:r:YYYYMMDDHH, UTC). */
function tallyHourKey(ms) {
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, '0');
    return `pc:2:r:${d.getUTCFullYear()}${p(d.getUTCMonth() + 1)}${p(d.getUTCDate())}${p(d.getUTCHours())}`;
}

/* n fields of hash key written by a script in Redis itself: field and value are Lua expressions of i. */
async function forgeHash(redis, key, n, field, value) {
    await redis.command('EVAL', `for i = 1, ${n} do redis.call('HSET', KEYS[1], ${field}, ${value}) end`,
        '1', key);
}

/*
 * One command with binary arguments on a connection of its own (RespClient speaks strings);
 * resolves with the parsed reply and its raw bytes, rejects on an error reply.
 */
function rawReply(port, ...args) {
    const parts = [Buffer.from(`*${args.length}\r\n`)];
    for (const a of args) {
        const b = Buffer.isBuffer(a) ? a : Buffer.from(String(a));
        parts.push(Buffer.from(`$${b.length}\r\n`), b, Buffer.from('\r\n'));
    }
    return new Promise((resolve, reject) => {
        const sock = net.connect({port, host: '127.0.0.1'});
        let buf = Buffer.alloc(0);
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            const r = parseResp(buf, 0);
            if (!r)
                return;
            sock.end();
            if (r.value instanceof Error)
                reject(r.value);
            else
                resolve({value: r.value, bytes: buf.subarray(0, r.next)});
        });
        sock.on('error', reject);
        sock.write(Buffer.concat(parts));
    });
}

module.exports = {startRedis, freePort, RespClient, redisCommand, rawReply, parseResp, tallyHourKey, forgeHash};
