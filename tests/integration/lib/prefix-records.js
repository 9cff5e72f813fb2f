'use strict';
/*
 * Prefix records as another instance writes them (src/psync.c), for tests that forge them:
 * links, stream records, and one Redis command with binary arguments (the harness's client
 * speaks strings).
 */
const crypto = require('node:crypto');
const {rawReply} = require('./redis');

/* One command with binary arguments; resolves with the parsed reply. */
async function rawCommand(port, ...args) {
    return (await rawReply(port, ...args)).value;
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
