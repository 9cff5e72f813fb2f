'use strict';
/*
 * sentinel.js - a Redis Sentinel group on loopback for the failover tests: a
 * primary, a replica and three sentinels (redis-sentinel, Debian's package,
 * or redis-server --sentinel where only that is installed), on ports chosen
 * here, each sentinel with a config file of its own (Sentinel rewrites it).
 *
 * Failovers are made quick: down-after-milliseconds 1000 (a primary that
 * does not answer for a second is down), failover-timeout 3000.
 * ready() waits until every sentinel knows the replica and the other
 * sentinels and the replica is in sync, so that a failover can start as soon
 * as the primary is killed. With a password, the sentinels require it
 * (requirepass) from their clients and from each other.
 */
const fs = require('node:fs');
const path = require('node:path');
const {spawnSync} = require('node:child_process');
const {spawnTracked, tmpDir} = require('./procs');
const {startRedis, freePort, redisCommand, RespClient} = require('./redis');
const {waitFor} = require('./wait');

const MASTER = 'mymaster';

/* redis-sentinel if installed, else redis-server in sentinel mode. */
function sentinelCommand(conf) {
    const found = spawnSync('sh', ['-c', 'command -v redis-sentinel'], {encoding: 'utf8'});
    return found.status === 0 ? ['redis-sentinel', [conf]] : ['redis-server', [conf, '--sentinel']];
}

/* One sentinel on a free port, watching the primary; retried if the port is taken. */
async function startOneSentinel(dir, i, primaryPort, opts) {
    for (let attempt = 1; ; attempt++) {
        const port = await freePort();
        const conf = path.join(dir, `sentinel-${i}.conf`);
        fs.writeFileSync(conf, [
            `port ${port}`,
            'bind 127.0.0.1',
            'daemonize no',
            `dir ${dir}`,
            `sentinel monitor ${MASTER} 127.0.0.1 ${primaryPort} 2`,
            `sentinel down-after-milliseconds ${MASTER} ${opts.downAfterMs}`,
            `sentinel failover-timeout ${MASTER} ${opts.failoverTimeoutMs}`,
            `sentinel parallel-syncs ${MASTER} 1`,
            /* with a password, the sentinels need it for each other too */
            ...(opts.password ? [`requirepass ${opts.password}`, `sentinel sentinel-pass ${opts.password}`] : []),
            '',
        ].join('\n'));
        const [cmd, args] = sentinelCommand(conf);
        const proc = spawnTracked(`sentinel :${port}`, cmd, args);
        try {
            await waitFor(async () => {
                if (!proc.alive)
                    throw new Error(`sentinel exited: ${proc.tail(5)}`);
                return (await sentinelAsk(port, opts.password, 'PING')) === 'PONG';
            }, {timeout: 10000, what: `sentinel on port ${port} to answer PING`});
            return {port, proc};
        } catch (e) {
            await proc.kill();
            if (!/address already in use/i.test(proc.output) || attempt >= 5)
                throw e;
        }
    }
}

/* One command to a sentinel (after AUTH when it has a password). */
async function sentinelAsk(port, password, ...args) {
    if (!password)
        return redisCommand(port, ...args);
    const c = await RespClient.connect(port);
    try {
        await c.command('AUTH', password);
        return await c.command(...args);
    } finally {
        c.close();
    }
}

/* A flat [k1, v1, k2, v2...] reply as an object. */
function pairs(list) {
    const o = {};
    for (let i = 0; i + 1 < list.length; i += 2)
        o[list[i]] = list[i + 1];
    return o;
}

/*
 * Start the group: {primary, replica, sentinels: [{port, proc}], master,
 * url(extra) (the sentinel:// URL, the third sentinel named "localhost"),
 * ready(), masterPort(), stop()}.
 */
async function startSentinelGroup({downAfterMs = 1000, failoverTimeoutMs = 3000, password = null} = {}) {
    const primary = await startRedis();
    const replica = await startRedis({args: ['--replicaof', '127.0.0.1', String(primary.port)]});
    const dir = tmpDir('pc-sentinel-');
    const sentinels = [];
    for (let i = 0; i < 3; i++)
        sentinels.push(await startOneSentinel(dir, i, primary.port, {downAfterMs, failoverTimeoutMs, password}));
    const g = {
        primary, replica, sentinels, master: MASTER,
        /* the URL the proxy is given; the last sentinel by name, to be resolved */
        url: (tail = '') => `sentinel://${sentinels.map((s, i) =>
            `${i === 2 ? 'localhost' : '127.0.0.1'}:${s.port}`).join(',')}/${MASTER}${tail}`,
        ask: (i, ...args) => sentinelAsk(sentinels[i].port, password, ...args),
        /* The primary's port as sentinel i sees it now. */
        async masterPort(i = 0) {
            const a = await g.ask(i, 'SENTINEL', 'get-master-addr-by-name', MASTER);
            return a ? Number(a[1]) : null;
        },
        async ready(timeout = 30000) {
            await waitFor(async () => {
                const info = await replica.command('INFO', 'replication');
                if (!/master_link_status:up/.test(info))
                    return false;
                for (let i = 0; i < sentinels.length; i++) {
                    const reps = await g.ask(i, 'SENTINEL', 'replicas', MASTER);
                    const others = await g.ask(i, 'SENTINEL', 'sentinels', MASTER);
                    const okRep = reps.some((r) => Number(pairs(r).port) === replica.port &&
                        !/s_down|disconnected/.test(pairs(r).flags));
                    if (!okRep || others.length !== sentinels.length - 1)
                        return false;
                }
                return true;
            }, {timeout, interval: 100, what: 'the sentinels to know the replica and each other'});
        },
        async stop() {
            await Promise.all(sentinels.map((s) => s.proc.terminate(5000)));
            await Promise.all([primary, replica].filter((r) => r.alive).map((r) => r.stop()));
        },
    };
    return g;
}

module.exports = {startSentinelGroup, MASTER};
