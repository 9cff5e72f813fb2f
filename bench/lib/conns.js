'use strict';
/*
 * bench/lib/conns.js - run by bench/conns (which raises `ulimit -n` first).
 *
 * Phase 1: promptcache with max-connections above CONNS; CONNS client
 * connections are opened, each sends one request (a cached chat completion,
 * a HIT, keep-alive) and then stays idle. The proxy's RSS before and after,
 * and per idle connection; connections_active from /stats; every connection
 * still open after HOLD_S seconds; RSS once they are all closed.
 * Phase 2: promptcache with max-connections LIMIT; LIMIT connections held
 * the same way, then one more: what it is answered to a chat completion (a
 * 503 in the API's error shape with Retry-After, then the connection
 * closes), and to GET /healthz (answered at the limit); once one held
 * connection closes, a new one is served again.
 * Last line: one JSON object.
 */
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const REPO = path.resolve(__dirname, '..', '..');
const lib = require(path.join(REPO, 'tests', 'integration', 'lib'));

const num = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const CONNS = num('CONNS', 10000);
const LIMIT = num('LIMIT', 1000);
const WORKERS = num('WORKERS', 2);
const HOLD_S = num('HOLD_S', 5);
const BATCH = num('BATCH', 250);
const PROXY_ARGS = (process.env.PROXY_ARGS || '').split(/\s+/).filter(Boolean);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const BODY = JSON.stringify({model: 'gpt-4o-mini', messages: [{role: 'user', content: 'Hold this connection open.'}]});
const CHAT = `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer sk-conns\r\n` +
    `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(BODY)}\r\n\r\n${BODY}`;
const HEALTH = 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n';

function mem(pid) {
    const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (k) => Number((new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(st) || [0, 0])[1]);
    return {rss_kib: kb('VmRSS'), fds: fs.readdirSync(`/proc/${pid}/fd`).length};
}

/*
 * One client connection that sends one request and reads one response
 * (Content-Length or chunked to its end, or to the close).
 * Resolves {sock, status, headers, body, closed}.
 */
function exchange(port, request) {
    return new Promise((resolve) => {
        const sock = net.connect({port, host: '127.0.0.1'});
        let buf = Buffer.alloc(0);
        let done = false;
        const out = {sock, status: 0, headers: {}, body: '', closed: false, error: null};
        const finish = () => {
            if (!done) {
                done = true;
                resolve(out);
            }
        };
        const parse = () => {
            const end = buf.indexOf('\r\n\r\n');
            if (end < 0) return;
            const head = buf.subarray(0, end).toString('latin1').split('\r\n');
            out.status = Number((/^HTTP\/1\.\d (\d+)/.exec(head[0]) || [0, 0])[1]);
            for (const l of head.slice(1)) {
                const i = l.indexOf(':');
                out.headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
            }
            const rest = buf.subarray(end + 4);
            const cl = out.headers['content-length'];
            if (cl !== undefined && rest.length >= Number(cl)) {
                out.body = rest.subarray(0, Number(cl)).toString('utf8');
                finish();
            } else if (/chunked/i.test(out.headers['transfer-encoding'] || '') && rest.includes('0\r\n\r\n')) {
                out.body = rest.toString('utf8');
                finish();
            }
        };
        sock.on('data', (d) => {
            buf = Buffer.concat([buf, d]);
            if (!done) parse();
        });
        sock.on('error', (e) => {
            out.error = e.code || e.message;
        });
        sock.on('close', () => {
            out.closed = true;
            if (!done) {
                parse();
                if (!done) out.body = buf.toString('utf8');
                finish();
            }
        });
        sock.on('connect', () => sock.write(request));
    });
}

/* Open n connections in batches; each makes one request and is kept. */
async function openMany(port, n) {
    const held = [];
    const statuses = {};
    for (let i = 0; i < n; i += BATCH) {
        const batch = await Promise.all(Array.from({length: Math.min(BATCH, n - i)}, () => exchange(port, CHAT)));
        for (const r of batch) {
            statuses[r.status] = (statuses[r.status] || 0) + 1;
            held.push(r);
        }
    }
    return {held, statuses};
}

async function closeAll(held) {
    for (const r of held) r.sock.destroy();
    await sleep(1000);
}

async function startProxy(env, maxConns) {
    const proxy = await lib.startProxy({upstream: env.mock.url, redis: env.redis, workers: WORKERS, logLevel: 'notice',
        args: ['--access-log', 'off', '--max-connections', String(maxConns), '--client-timeout', '600',
            ...PROXY_ARGS]});
    await proxy.waitReady();
    /* the request every connection sends is a HIT from now on */
    await proxy.post('/v1/chat/completions', JSON.parse(BODY), {authorization: 'Bearer sk-conns'});
    const r = await proxy.post('/v1/chat/completions', JSON.parse(BODY), {authorization: 'Bearer sk-conns'});
    if (r.headers['x-cache-status'] !== 'HIT') throw new Error(`warm-up: X-Cache-Status ${r.headers['x-cache-status']}`);
    await sleep(500);
    return proxy;
}

async function phase1(env) {
    const proxy = await startProxy(env, CONNS + 100);
    try {
        const before = mem(proxy.pid);
        const t0 = Date.now();
        const {held, statuses} = await openMany(proxy.port, CONNS);
        const openS = (Date.now() - t0) / 1000;
        await sleep(1000);
        const after = mem(proxy.pid);
        const active = (await proxy.stats()).connections_active;
        await sleep(HOLD_S * 1000);
        const stillOpen = held.filter((r) => !r.closed).length;
        const held2 = mem(proxy.pid);
        await closeAll(held);
        await sleep(1000);
        const closed = mem(proxy.pid);
        const res = {conns: CONNS, open_s: Number(openS.toFixed(2)), statuses, connections_active: active,
            still_open_after_hold: stillOpen, hold_s: HOLD_S, rss_before_kib: before.rss_kib,
            rss_held_kib: after.rss_kib, rss_after_hold_kib: held2.rss_kib, rss_closed_kib: closed.rss_kib,
            fds_before: before.fds, fds_held: after.fds, fds_closed: closed.fds,
            bytes_per_idle_conn: Math.round(((after.rss_kib - before.rss_kib) * 1024) / CONNS)};
        console.log(`phase 1: ${CONNS} keep-alive connections, each one request (answers: ` +
            `${Object.entries(statuses).map(([s, n]) => `${n} x ${s}`).join(', ')}), opened in ${res.open_s} s`);
        console.log(`  proxy RSS before ${(before.rss_kib / 1024).toFixed(1)} MiB, with all held ` +
            `${(after.rss_kib / 1024).toFixed(1)} MiB -> ${res.bytes_per_idle_conn} bytes per idle connection`);
        console.log(`  connections_active ${active}; fds ${before.fds} -> ${after.fds}; after ${HOLD_S} s idle ` +
            `${stillOpen}/${CONNS} still open, RSS ${(held2.rss_kib / 1024).toFixed(1)} MiB`);
        console.log(`  all closed: RSS ${(closed.rss_kib / 1024).toFixed(1)} MiB, fds ${closed.fds}`);
        return res;
    } finally {
        await proxy.stop();
    }
}

async function phase2(env) {
    const proxy = await startProxy(env, LIMIT);
    try {
        const {held, statuses} = await openMany(proxy.port, LIMIT);
        await sleep(300);
        const extra = await exchange(proxy.port, CHAT);
        const extraHealth = await exchange(proxy.port, HEALTH);
        let json = null;
        try {
            json = JSON.parse(extra.body);
        } catch (e) {
            json = null;
        }
        const polite = extra.status === 503 && !!json && !!json.error && extra.headers['retry-after'] === '1';
        await sleep(300);
        const extraClosed = extra.closed;
        extra.sock.destroy();
        extraHealth.sock.destroy();
        /* one held connection goes away: a new one is served again */
        held[0].sock.destroy();
        await sleep(300);
        const again = await exchange(proxy.port, CHAT);
        again.sock.destroy();
        await closeAll(held);
        const stats = await proxy.stats();
        const res = {limit: LIMIT, workers: WORKERS, held_statuses: statuses, extra_status: extra.status,
            extra_headers: {'content-type': extra.headers['content-type'], 'retry-after': extra.headers['retry-after'],
                connection: extra.headers.connection},
            extra_body: extra.body, extra_closed_by_proxy: extraClosed, extra_healthz_status: extraHealth.status,
            after_one_closed_status: again.status, again_cache: again.headers['x-cache-status'],
            connections_refused: stats.connections_refused, polite};
        console.log(`phase 2: max-connections ${LIMIT}, ${WORKERS} worker(s); ${LIMIT} held (answers: ` +
            `${Object.entries(statuses).map(([s, n]) => `${n} x ${s}`).join(', ')})`);
        console.log(`  connection ${LIMIT + 1}, POST /v1/chat/completions: HTTP ${extra.status}, ` +
            `Content-Type ${extra.headers['content-type']}, Retry-After ${extra.headers['retry-after']}, ` +
            `Connection ${extra.headers.connection}; closed by the proxy: ${extraClosed ? 'yes' : 'no'}`);
        console.log(`  its body: ${extra.body.trim()}`);
        console.log(`  connection ${LIMIT + 2}, GET /healthz: HTTP ${extraHealth.status}`);
        console.log(`  after one held connection closed, a new one: HTTP ${again.status} (${again.headers['x-cache-status']})`);
        console.log(`  connections_refused ${stats.connections_refused} -> refused politely: ${polite ? 'yes' : 'NO'}`);
        return res;
    } finally {
        await proxy.stop();
    }
}

async function main() {
    const cpu = (os.cpus()[0] || {}).model || 'unknown CPU';
    console.log(`promptcache bench/conns: ${new Date().toISOString()}; ${os.cpus().length} cores, ${cpu}, ` +
        `Linux ${os.release()}; ulimit -n ${process.env.CONNS_ULIMIT || '?'}`);
    const env = {mock: await lib.startMock(), redis: await lib.startRedis()};
    try {
        const p1 = await phase1(env);
        const p2 = await phase2(env);
        console.log(JSON.stringify({phase1: p1, phase2: p2}));
        process.exitCode = p1.still_open_after_hold === CONNS && p2.polite ? 0 : 1;
    } finally {
        await env.redis.stop();
        await env.mock.close();
    }
}

main().catch((e) => {
    console.error(e.stack || String(e));
    process.exit(2);
});
