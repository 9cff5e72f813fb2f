'use strict';
/*
 * dribble.js - a server on the Redis protocol (as a Redis, a sentinel or a
 * cluster node) that answers every command a byte at a time: one byte every
 * everyMs, each well within the client's timeout for one read, for as long as
 * the client stays. reply(name) gives the answer to a command (RESP text);
 * by default a bulk of 1000 bytes, which takes minutes to come whole.
 *
 * gaveUp() counts the connections the client closed while bytes of an answer
 * were still owed: the client gave up, rather than the server finishing.
 */
const net = require('node:net');
const {respEnd} = require('./resp-fault');

const LONG_BULK = `$1000\r\n${'x'.repeat(1000)}\r\n`;

/* The command name (first bulk, upper case) of a RESP array of bulks. */
function commandName(buf) {
    const m = /^\*\d+\r\n\$\d+\r\n([^\r]*)\r\n/.exec(buf.toString('latin1', 0, Math.min(buf.length, 64)));
    return m ? m[1].toUpperCase() : '';
}

async function startDribbler({everyMs = 400, reply = () => LONG_BULK} = {}) {
    const sockets = new Set();
    const asked = [];
    let gaveUp = 0;
    const server = net.createServer((sock) => {
        sockets.add(sock);
        let inBuf = Buffer.alloc(0);
        let owed = Buffer.alloc(0);
        let timer = null;
        const drip = () => {
            timer = null;
            if (sock.destroyed || owed.length === 0)
                return;
            sock.write(owed.subarray(0, 1));
            owed = owed.subarray(1);
            timer = setTimeout(drip, everyMs);
        };
        sock.on('data', (chunk) => {
            inBuf = Buffer.concat([inBuf, chunk]);
            let end;
            while ((end = respEnd(inBuf, 0)) > 0) {
                const name = commandName(inBuf.subarray(0, end));
                asked.push(name);
                owed = Buffer.concat([owed, Buffer.from(reply(name), 'latin1')]);
                inBuf = inBuf.subarray(end);
            }
            if (timer === null && owed.length > 0)
                timer = setTimeout(drip, everyMs);
        });
        sock.on('close', () => {
            clearTimeout(timer);
            if (owed.length > 0)
                gaveUp++;
            sockets.delete(sock);
        });
        sock.on('error', () => {});
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    const port = server.address().port;
    return {
        port,
        at: `127.0.0.1:${port}`,
        /* The commands asked so far, by name. */
        asked: () => [...asked],
        gaveUp: () => gaveUp,
        async close() {
            for (const s of sockets)
                s.destroy();
            await new Promise((resolve) => server.close(resolve));
        },
    };
}

/* RESP for SENTINEL get-master-addr-by-name naming host:port. */
function masterAddrReply(host, port) {
    const p = String(port);
    return `*2\r\n$${host.length}\r\n${host}\r\n$${p.length}\r\n${p}\r\n`;
}

module.exports = {startDribbler, masterAddrReply, LONG_BULK};
