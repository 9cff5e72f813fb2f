'use strict';
/*
 * resp-fault.js - a Redis that misbehaves on command: a RESP relay in front of
 * a real redis-server that passes commands through (so the proxy connects,
 * migrates and caches as usual) until a fault is set, and then answers the
 * commands that arrive after it with that fault, on every connection, old or
 * new, until it is cleared:
 *
 *   error     -ERR reply to every command
 *   integer   an integer (:42) where anything else is expected
 *   nested    nested arrays (*2 of *2 of ...) where a bulk or a flat array is expected
 *   hugebulk  a bulk of length 2^40: its header and a few KB, then nothing more
 *   hugearray an array of 2^40 elements, two of them, then nothing more
 *   negarray  an array of -3 elements, in turn alone and inside another (hiredis 0.14 makes
 *             it an array of 2^64 - 3 elements without an element list)
 *   flood     a bulk of length 2^40 whose bytes keep coming (as fast as the proxy reads),
 *             up to FLOOD_LIMIT per connection, then nothing more; floods() tells for each
 *             connection flooded how much was sent and whether the proxy closed it first
 *   arrayflood an array announcing 2,000,000,000 elements (hiredis 0.14 callocs 16 GB of
 *             element pointers for it), then ":1" elements as fast as the proxy reads, up
 *             to ELEMENTS_LIMIT bytes per connection (as flood, in floods())
 *   nestflood an array of 1,000 arrays of 100,000 ":1" each, as fast as the proxy reads, up
 *             to ELEMENTS_LIMIT bytes (every count announced is modest, their sum is not)
 *   garbage   no RESP: a RESP3 map, or a line without a type byte, in turn
 *   cut       the command runs on Redis; half of its reply is sent, then the connection
 *             is closed
 *   silent    nothing: the command is swallowed, the connection stays open
 *   dribble   the command runs on Redis; its reply is sent a byte at a time, one every
 *             everyMs (1000 by default), the replies after it waiting their turn
 *
 * set(fault, {only, text, everyMs}) limits the fault to commands named in only (upper
 * case, e.g. ['GET']) and, with text, to those whose bytes hold it (e.g.
 * '$3\r\nadd\r\n'); the others pass. Replies stay in command order: a command
 * answered by the fault waits for the replies owed before it. After hugebulk
 * or silent a connection never answers again; after cut it is closed.
 */
const net = require('node:net');

const HUGE = 2 ** 40;
const FLOOD_LIMIT = 256 * 1024 * 1024;
const FLOOD_CHUNK = Buffer.alloc(64 * 1024, 'x');
const ELEMENTS_LIMIT = 32 * 1024 * 1024;
/* What each flood sends: its header, then its chunk again and again up to its limit. */
const FLOODS = {
    flood: {head: `$${HUGE}\r\n`, chunk: FLOOD_CHUNK, limit: FLOOD_LIMIT},
    arrayflood: {head: '*2000000000\r\n', chunk: Buffer.from(':1\r\n'.repeat(16384)),
        limit: ELEMENTS_LIMIT},
    nestflood: {head: '*1000\r\n', chunk: Buffer.from(`*100000\r\n${':1\r\n'.repeat(100000)}`),
        limit: ELEMENTS_LIMIT},
};

/* The end of the RESP value at buf[i], or -1 if the buffer does not hold all of it yet. */
function respEnd(buf, i) {
    const eol = buf.indexOf('\r\n', i);
    if (eol < 0)
        return -1;
    const type = String.fromCharCode(buf[i]);
    const n = Number(buf.toString('latin1', i + 1, eol));
    const next = eol + 2;
    switch (type) {
    case '+': case '-': case ':':
        return next;
    case '$':
        if (n < 0)
            return next;
        return buf.length >= next + n + 2 ? next + n + 2 : -1;
    case '*': {
        let at = next;
        for (let k = 0; k < n; k++) {
            at = respEnd(buf, at);
            if (at < 0)
                return -1;
        }
        return at;
    }
    default:
        throw new Error(`RESP: unexpected type byte ${JSON.stringify(type)}`);
    }
}

/* The command name (first bulk, upper case) of a RESP array of bulks. */
function commandName(buf) {
    const m = /^\*\d+\r\n\$\d+\r\n([^\r]*)\r\n/.exec(buf.toString('latin1', 0, Math.min(buf.length, 64)));
    return m ? m[1].toUpperCase() : '';
}

const NESTED = '*2\r\n*2\r\n$1\r\na\r\n*1\r\n:7\r\n*2\r\n*1\r\n$0\r\n\r\n*0\r\n';

const LOCAL = {
    error: () => Buffer.from('-ERR injected fault\r\n'),
    integer: () => Buffer.from(':42\r\n'),
    nested: () => Buffer.from(NESTED),
    hugebulk: () => Buffer.from(`$${HUGE}\r\n${'x'.repeat(4096)}`),
    hugearray: () => Buffer.from(`*${HUGE}\r\n$1\r\na\r\n:1\r\n`),
    garbage: (n) => Buffer.from(n % 2 ? '%1\r\n+a\r\n:1\r\n' : 'hello\r\n'),
    negarray: (n) => Buffer.from(n % 2 ? '*-3\r\n' : '*2\r\n*-3\r\n$1\r\na\r\n'),
};
const STUCK = new Set(['hugebulk', 'hugearray']);

async function startRespFault(redisPort) {
    let fault = null; /* {name, only, text, everyMs} */
    const sockets = new Set();
    const seen = {}; /* commands answered by each fault */
    const floods = []; /* {kind, sent, limitReached, closed} per connection flooded */

    const server = net.createServer((client) => {
        const up = net.connect(redisPort, '127.0.0.1');
        sockets.add(client).add(up);
        const conn = {inBuf: Buffer.alloc(0), upBuf: Buffer.alloc(0), slots: [], dead: false, flood: null};

        /* The flood's chunks while the proxy reads them, up to its limit. */
        const flood = () => {
            const f = conn.flood, how = FLOODS[f.kind];
            while (!conn.dead && f.sent < how.limit) {
                f.sent += how.chunk.length;
                if (!client.write(how.chunk)) {
                    client.once('drain', flood);
                    return;
                }
            }
            f.limitReached = f.sent >= how.limit;
        };

        /* A byte of the dribbled reply at the head, then the next in everyMs; pump when done. */
        const drip = (slot) => {
            slot.dripping = true;
            if (conn.dead)
                return;
            client.write(slot.reply.subarray(0, 1));
            slot.reply = slot.reply.subarray(1);
            if (slot.reply.length > 0) {
                setTimeout(() => drip(slot), slot.everyMs);
                return;
            }
            conn.slots.shift();
            pump();
        };

        /* Write out every slot at the head that can be answered now. */
        const pump = () => {
            while (!conn.dead && conn.slots.length) {
                const slot = conn.slots[0];
                if (slot.kind === 'stuck')
                    return;
                if (FLOODS[slot.kind]) {
                    conn.slots[0] = {kind: 'stuck'};
                    client.write(FLOODS[slot.kind].head);
                    conn.flood = {kind: slot.kind, sent: 0, limitReached: false, closed: false};
                    floods.push(conn.flood);
                    flood();
                    return;
                }
                if (slot.kind === 'local') {
                    conn.slots.shift();
                    client.write(slot.bytes);
                    if (slot.then === 'stuck')
                        conn.slots.unshift({kind: 'stuck'});
                    continue;
                }
                if (slot.reply === undefined)
                    return;
                if (slot.kind === 'dribble') {
                    if (!slot.dripping)
                        drip(slot);
                    return;
                }
                conn.slots.shift();
                if (slot.kind === 'cut') {
                    const half = Math.max(1, Math.floor(slot.reply.length / 2));
                    client.write(slot.reply.subarray(0, half));
                    conn.dead = true;
                    client.end();
                    client.destroy();
                    return;
                }
                client.write(slot.reply);
            }
        };

        client.on('data', (chunk) => {
            conn.inBuf = Buffer.concat([conn.inBuf, chunk]);
            let end;
            while ((end = respEnd(conn.inBuf, 0)) > 0) {
                const cmd = conn.inBuf.subarray(0, end);
                conn.inBuf = conn.inBuf.subarray(end);
                const name = commandName(cmd);
                const f = fault && (!fault.only || fault.only.includes(name)) &&
                    (!fault.text || cmd.includes(fault.text)) ? fault.name : null;
                if (f !== null)
                    seen[f] = (seen[f] || 0) + 1;
                if (f === null || f === 'cut' || f === 'dribble') {
                    conn.slots.push({kind: f === null ? 'redis' : f, everyMs: fault && fault.everyMs});
                    up.write(cmd);
                } else if (f === 'silent' || FLOODS[f]) {
                    conn.slots.push({kind: FLOODS[f] ? f : 'stuck'});
                } else {
                    conn.slots.push({kind: 'local', bytes: LOCAL[f](seen[f]),
                        then: STUCK.has(f) ? 'stuck' : null});
                }
            }
            pump();
        });
        up.on('data', (chunk) => {
            conn.upBuf = Buffer.concat([conn.upBuf, chunk]);
            let end;
            while ((end = respEnd(conn.upBuf, 0)) > 0) {
                const reply = conn.upBuf.subarray(0, end);
                conn.upBuf = conn.upBuf.subarray(end);
                const slot = conn.slots.find((s) => ['redis', 'cut', 'dribble'].includes(s.kind) &&
                    s.reply === undefined);
                if (slot)
                    slot.reply = Buffer.from(reply);
            }
            pump();
        });
        client.on('close', () => {
            conn.dead = true;
            if (conn.flood)
                conn.flood.closed = true;
            up.destroy();
        }).on('error', () => client.destroy());
        up.on('close', () => client.destroy()).on('error', () => up.destroy());
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = server.address().port;
    return {
        port,
        url: `redis://127.0.0.1:${port}/0`,
        /* Answer the commands that arrive from now on with fault (null: pass them). */
        set(name, {only = null, text = null, everyMs = 1000} = {}) {
            if (name !== null && !['cut', 'silent', 'dribble'].includes(name) && !FLOODS[name] && !LOCAL[name])
                throw new Error(`resp-fault: unknown fault ${name}`);
            fault = name === null ? null : {name, only, text, everyMs};
        },
        clear() { fault = null; },
        /* The connections flooded so far: {kind, sent, limitReached, closed} each. */
        floods: () => floods.map((f) => ({...f})),
        /* How many commands fault answered so far. */
        answered: (name) => seen[name] || 0,
        /* Close every connection (the proxy reconnects, meeting the fault from its handshake). */
        dropAll() {
            for (const s of sockets)
                s.destroy();
            sockets.clear();
        },
        async close() {
            this.dropAll();
            await new Promise((resolve) => server.close(resolve));
        },
    };
}

module.exports = {startRespFault, respEnd, FLOOD_LIMIT, ELEMENTS_LIMIT};
