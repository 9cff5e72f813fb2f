'use strict';
/*
 * cluster.js - a Redis Cluster on loopback for the cluster tests and
 * bench/cluster: primaries and replicas started here (redis-server
 * --cluster-enabled yes, each on a free port with a directory and a
 * nodes.conf of its own) and made one cluster by `redis-cli --cluster
 * create ... --cluster-replicas N --cluster-yes`.
 *
 * Failovers are made quick (cluster-node-timeout 1000: a primary silent for
 * a second is failed, its replica takes over). Nothing is persisted but
 * nodes.conf, so a node restarted with restart() rejoins the cluster in the
 * role it had, with no data (a primary's replica resyncs from it).
 *
 * Helpers read the cluster as a client would: shards() (CLUSTER SHARDS from
 * any live node), waitHealthy() (every live node says cluster_state:ok, every
 * slot has a primary, each primary's replicas are in sync), countKeys(port,
 * pattern) (SCAN on one node), and make it move: reshard(), kill(), restart().
 */
const {spawn} = require('node:child_process');
const {spawnTracked, tmpDir} = require('./procs');
const {freePort, redisCommand} = require('./redis');
const {waitFor} = require('./wait');

const SLOTS = 16384;

/* CRC16 XMODEM of a string's bytes, and the hash slot of a key (its {tag} if it has one). */
function crc16(buf) {
    let crc = 0;
    for (const b of buf) {
        crc ^= b << 8;
        for (let k = 0; k < 8; k++)
            crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
    }
    return crc;
}

function keySlot(key) {
    const open = key.indexOf('{');
    const close = open >= 0 ? key.indexOf('}', open + 1) : -1;
    const part = close > open + 1 ? key.slice(open + 1, close) : key;
    return crc16(Buffer.from(part)) % SLOTS;
}

/* A flat [k1, v1, ...] reply as an object. */
function pairs(list) {
    const o = {};
    for (let i = 0; i + 1 < list.length; i += 2)
        o[list[i]] = list[i + 1];
    return o;
}

function nodeArgs(port, dir, nodeTimeoutMs) {
    return ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--daemonize', 'no',
        '--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf',
        '--cluster-node-timeout', String(nodeTimeoutMs), '--save', '', '--appendonly', 'no'];
}

/* One node on a free port (another is tried if it was taken meanwhile). */
async function startNode(nodeTimeoutMs) {
    for (let attempt = 1; ; attempt++) {
        const port = await freePort();
        const dir = tmpDir('pc-cluster-node-');
        const node = {port, dir, proc: null, nodeTimeoutMs};
        node.proc = spawnTracked(`redis-server :${port} (cluster)`, 'redis-server', nodeArgs(port, dir, nodeTimeoutMs));
        try {
            await waitPong(node);
            return node;
        } catch (e) {
            await node.proc.kill();
            if (!/address already in use/i.test(node.proc.output) || attempt >= 5)
                throw e;
        }
    }
}

async function waitPong(node) {
    await waitFor(async () => {
        if (!node.proc.alive)
            throw new Error(`redis-server exited: ${node.proc.tail(5)}`);
        return (await redisCommand(node.port, 'PING')) === 'PONG';
    }, {timeout: 10000, what: `cluster node :${node.port} to answer PING`});
}

/* Run redis-cli with args; resolves to its output, rejects if it exits non-zero. */
function redisCli(args, timeoutMs = 120000) {
    return new Promise((resolve, reject) => {
        const p = spawn('redis-cli', args, {stdio: ['ignore', 'pipe', 'pipe']});
        let out = '';
        p.stdout.on('data', (d) => (out += d));
        p.stderr.on('data', (d) => (out += d));
        const timer = setTimeout(() => p.kill('SIGKILL'), timeoutMs);
        p.on('close', (code) => {
            clearTimeout(timer);
            if (code === 0)
                resolve(out);
            else
                reject(new Error(`redis-cli ${args.slice(0, 3).join(' ')}... exited ${code}:\n${out.slice(-2000)}`));
        });
    });
}

/* Primaries only: every node meets the first, and the slots are split evenly among them. */
async function assignByHand(nodes) {
    for (const n of nodes.slice(1))
        await redisCommand(n.port, 'CLUSTER', 'MEET', '127.0.0.1', String(nodes[0].port));
    for (const [i, n] of nodes.entries()) {
        const from = Math.floor((i * SLOTS) / nodes.length), to = Math.floor(((i + 1) * SLOTS) / nodes.length) - 1;
        await redisCommand(n.port, 'CLUSTER', 'ADDSLOTSRANGE', String(from), String(to));
    }
}

/*
 * Start a cluster of `primaries` primaries with `replicas` replicas each:
 * {nodes, url(), shards(), primaries(), waitHealthy(), countKeys(), kill(),
 * restart(), replace(), killAll(), restartAll(), reshard(), command(), stop()}.
 */
async function startCluster({primaries = 3, replicas = 1, nodeTimeoutMs = 1000} = {}) {
    const nodes = [];
    for (let i = 0; i < primaries * (1 + replicas); i++)
        nodes.push(await startNode(nodeTimeoutMs));
    if (primaries >= 3)
        await redisCli(['--cluster', 'create', ...nodes.map((n) => `127.0.0.1:${n.port}`),
            '--cluster-replicas', String(replicas), '--cluster-yes']);
    else /* redis-cli wants 3 primaries: fewer (and no replicas) by hand */
        await assignByHand(nodes);
    const c = {
        nodes,
        /* the URL the proxy is given: two seeds (a cluster client needs only one that answers) */
        url: (n = 2) => `cluster://${nodes.slice(0, n).map((x) => `127.0.0.1:${x.port}`).join(',')}`,
        command: (port, ...args) => redisCommand(port, ...args),
        alive: () => nodes.filter((n) => n.proc.alive),

        /* [{slots: [[from, to]...], primary: {port, id}, replicas: [{port, id, health}]}] */
        async shards() {
            for (const n of c.alive()) {
                try {
                    const list = await redisCommand(n.port, 'CLUSTER', 'SHARDS');
                    return list.map((s) => {
                        const o = pairs(s);
                        const ns = o.nodes.map(pairs);
                        const ranges = [];
                        for (let i = 0; i + 1 < o.slots.length; i += 2)
                            ranges.push([Number(o.slots[i]), Number(o.slots[i + 1])]);
                        const p = ns.find((x) => x.role === 'master');
                        return {
                            slots: ranges,
                            primary: p ? {port: Number(p.port), id: p.id, health: p.health} : null,
                            replicas: ns.filter((x) => x.role !== 'master')
                                .map((x) => ({port: Number(x.port), id: x.id, health: x.health})),
                        };
                    });
                } catch (e) {
                    /* a node on its way down: ask the next */
                }
            }
            throw new Error('no cluster node answers CLUSTER SHARDS');
        },
        /* The primaries serving slots, ordered by port. */
        async primaries() {
            return (await c.shards()).filter((s) => s.primary && s.slots.length > 0)
                .map((s) => ({...s.primary, slots: s.slots})).sort((a, b) => a.port - b.port);
        },
        /* Every live node agrees the cluster is ok, every slot has a primary, replicas in sync. */
        async waitHealthy(timeout = 60000) {
            await waitFor(async () => {
                for (const n of c.alive()) {
                    const info = await redisCommand(n.port, 'CLUSTER', 'INFO');
                    if (!/cluster_state:ok/.test(info) || !/cluster_slots_ok:16384/.test(info))
                        return false;
                }
                const shards = await c.shards();
                let covered = 0;
                for (const s of shards) {
                    if (!s.primary || !c.alive().some((n) => n.port === s.primary.port))
                        return s.slots.length === 0;
                    covered += s.slots.reduce((sum, [a, b]) => sum + b - a + 1, 0);
                    for (const r of s.replicas.filter((x) => c.alive().some((n) => n.port === x.port))) {
                        const info = await redisCommand(r.port, 'INFO', 'replication');
                        if (!/master_link_status:up/.test(info))
                            return false;
                    }
                }
                return covered === SLOTS;
            }, {timeout, interval: 200, what: 'the cluster to be healthy (state ok, every slot served, replicas in sync)'});
        },
        /* Keys matching pattern on one node (SCAN: only that node's keys). */
        async countKeys(port, pattern = 'pc:2:e:*') {
            return (await c.keys(port, pattern)).length;
        },
        async keys(port, pattern = 'pc:2:e:*') {
            const out = [];
            let cursor = '0';
            do {
                const [next, batch] = await redisCommand(port, 'SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000');
                out.push(...batch);
                cursor = next;
            } while (cursor !== '0');
            return out;
        },
        node: (port) => nodes.find((n) => n.port === port),
        async kill(port) {
            await c.node(port).proc.kill();
        },
        /* Bring a node back on its port, with its nodes.conf (and no data). */
        async restart(port) {
            const n = c.node(port);
            if (n.proc.alive)
                await n.proc.kill();
            for (let attempt = 1; ; attempt++) {
                n.proc = spawnTracked(`redis-server :${port} (cluster)`, 'redis-server',
                    nodeArgs(port, n.dir, n.nodeTimeoutMs));
                try {
                    await waitPong(n);
                    return;
                } catch (e) {
                    await n.proc.kill();
                    if (attempt >= 10)
                        throw e;
                    await new Promise((r) => setTimeout(r, 300)); /* the port is free again soon */
                }
            }
        },
        /*
         * Put a new, empty node in the place of the dead one on port, as a replica of the
         * primary on primaryPort: every other node forgets the dead one (CLUSTER FORGET), the
         * new one meets the cluster and replicates. Restarting a failed primary from its
         * nodes.conf right after the failover went once in about twenty runs through a path of
         * Redis's own (its heir said "Cluster state changed: fail" 2 ms after the old primary
         * came back, and stayed so for over a minute): not what these tests are about.
         */
        async replace(port, primaryPort) {
            const old = c.node(port);
            if (old.proc.alive)
                await old.proc.kill();
            const idOf = async (p, onPort = p) => {
                const line = String(await redisCommand(onPort, 'CLUSTER', 'NODES')).split('\n')
                    .find((l) => l.includes(` 127.0.0.1:${p}@`));
                return line ? line.split(' ')[0] : null;
            };
            const live = c.alive().filter((n) => n !== old);
            const oldId = await idOf(port, live[0].port);
            if (oldId)
                for (const n of live)
                    await redisCommand(n.port, 'CLUSTER', 'FORGET', oldId);
            const fresh = await startNode(old.nodeTimeoutMs);
            nodes[nodes.indexOf(old)] = fresh;
            const primaryId = await idOf(primaryPort);
            await redisCommand(fresh.port, 'CLUSTER', 'MEET', '127.0.0.1', String(primaryPort));
            await waitFor(async () => (await idOf(primaryPort, fresh.port)) === primaryId,
                {timeout: 20000, interval: 100, what: `the new node :${fresh.port} to know its primary`});
            await redisCommand(fresh.port, 'CLUSTER', 'REPLICATE', primaryId);
            return fresh;
        },
        async killAll() {
            await Promise.all(nodes.map((n) => n.proc.kill()));
        },
        async restartAll() {
            for (const n of nodes)
                await c.restart(n.port);
        },
        /*
         * Move count slots from the primary on port `from` to the one on `to`
         * with redis-cli --cluster reshard (it moves the source's lowest slots,
         * keys included, one slot at a time).
         */
        async reshard(from, to, count) {
            const ps = await c.primaries();
            const src = ps.find((p) => p.port === from), dst = ps.find((p) => p.port === to);
            return redisCli(['--cluster', 'reshard', `127.0.0.1:${from}`, '--cluster-from', src.id,
                '--cluster-to', dst.id, '--cluster-slots', String(count), '--cluster-yes',
                '--cluster-pipeline', '10']);
        },
        /* The primary serving a key now: {port, id}. */
        async ownerOf(key) {
            const slot = keySlot(key);
            return (await c.primaries()).find((p) => p.slots.some(([a, b]) => slot >= a && slot <= b));
        },
        /* Entry keys on every primary (SCAN on each). */
        async allKeys(pattern = 'pc:2:e:*') {
            const out = [];
            for (const p of await c.primaries())
                out.push(...await c.keys(p.port, pattern));
            return out;
        },
        async stop() {
            await Promise.all(nodes.map((n) => n.proc.terminate(5000)));
        },
    };
    await c.waitHealthy();
    return c;
}

module.exports = {startCluster, redisCli, keySlot, SLOTS};
