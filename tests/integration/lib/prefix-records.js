'use strict';
/*
 * Prefix records as another instance writes them (src/psync.c), for tests that forge them:
 * links, stream records, and one Redis command with binary arguments (the harness's client
 * speaks strings).
 */
const crypto = require('node:crypto');
const net = require('node:net');
const {parseResp} = require('./redis');

/* One command with binary arguments; resolves with the reply. */
function rawCommand(port, ...args) {
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
            if (r.value instanceof Error) reject(r.value);
            else resolve(r.value);
        });
        sock.on('error', reject);
        sock.write(Buffer.concat(parts));
    });
}

/* A link: 8-byte hash and 4-byte tokens, big-endian. */
function link(hash, tokens) {
    const b = Buffer.alloc(12);
    b.writeBigUInt64BE(hash, 0);
    b.writeUInt32BE(tokens, 8);
    return b;
}

/* A stream record's d field: instance, ms (big-endian), replica name, links. */
function record(ms, replica, links) {
    const head = Buffer.alloc(17);
    crypto.randomBytes(8).copy(head, 0);
    head.writeBigUInt64BE(BigInt.asUintN(64, BigInt(ms)), 8);
    head[16] = Buffer.byteLength(replica);
    return Buffer.concat([head, Buffer.from(replica), ...links]);
}

const randomHash = () => crypto.randomBytes(8).readBigUInt64BE(0) | 1n;

module.exports = {rawCommand, link, record, randomHash};
