'use strict';
/*
 * raw.js - HTTP/1.1 over a bare TCP socket, for what node's http module will
 * not send or hides: requests without (or with two) Host headers, a
 * connection held open and reused at will, the source address of a
 * connection. Responses are read with Content-Length framing (what the
 * proxy's own answers use) or until the server closes.
 */
const net = require('node:net');
const {withDeadline} = require('./wait');

const DEFAULT_TIMEOUT = 10000;

class RawConnection {
    /* Connect to port on 127.0.0.1 (from localAddress, if given). */
    static open(port, {localAddress} = {}) {
        return withDeadline(new Promise((resolve, reject) => {
            const sock = net.connect({host: '127.0.0.1', port, localAddress}, () => {
                sock.off('error', reject);
                resolve(new RawConnection(sock));
            });
            sock.once('error', reject);
        }), DEFAULT_TIMEOUT, `connect to 127.0.0.1:${port}`);
    }

    constructor(sock) {
        this.sock = sock;
        this.buf = Buffer.alloc(0);
        this.ended = false;
        this.waiters = [];
        sock.on('data', (d) => {
            this.buf = Buffer.concat([this.buf, d]);
            this.wake();
        });
        sock.on('end', () => {
            this.ended = true;
            this.wake();
        });
        sock.on('close', () => {
            this.ended = true;
            this.wake();
        });
        sock.on('error', () => { /* a reset shows as the end of input */ });
    }

    wake() {
        const w = this.waiters;
        this.waiters = [];
        w.forEach((fn) => fn());
    }

    /* Resolves once pred() is true (checked on every arrival). */
    until(pred, what, timeout = DEFAULT_TIMEOUT) {
        return withDeadline(new Promise((resolve) => {
            const check = () => (pred() ? resolve() : this.waiters.push(check));
            check();
        }), timeout, what);
    }

    send(text) {
        this.sock.write(text);
    }

    /* Read one response: {status, headers (lower-case names), body (string)}. */
    async response(timeout = DEFAULT_TIMEOUT) {
        await this.until(() => this.buf.indexOf('\r\n\r\n') >= 0 || this.ended,
            'a response head', timeout);
        const end = this.buf.indexOf('\r\n\r\n');
        if (end < 0)
            throw new Error(`connection closed without a response (${this.buf.length} bytes)`);
        const lines = this.buf.subarray(0, end).toString('latin1').split('\r\n');
        const status = Number(lines[0].split(' ')[1]);
        const headers = {};
        for (const l of lines.slice(1)) {
            const i = l.indexOf(':');
            headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
        }
        this.buf = this.buf.subarray(end + 4);
        let len = headers['content-length'] !== undefined ? Number(headers['content-length']) : null;
        if (len === null)
            await this.until(() => this.ended, 'the end of a close-delimited body', timeout);
        if (len === null)
            len = this.buf.length;
        await this.until(() => this.buf.length >= len || this.ended, 'a response body', timeout);
        const body = this.buf.subarray(0, len).toString('utf8');
        this.buf = this.buf.subarray(len);
        return {status, headers, body, json: parseJson(body)};
    }

    /* Send a request and read its response. */
    async roundtrip(text, timeout) {
        this.send(text);
        return this.response(timeout);
    }

    /* Resolves true once the server closed the connection (and sent nothing more). */
    async closedByServer(timeout = DEFAULT_TIMEOUT) {
        await this.until(() => this.ended, 'the server to close the connection', timeout);
        return this.buf.length === 0;
    }

    close() {
        this.sock.destroy();
    }
}

function parseJson(text) {
    try {
        return JSON.parse(text);
    } catch (e) {
        return null;
    }
}

module.exports = {RawConnection};
