'use strict';
/*
 * A relay between the proxy and Redis that can hold one connection, as a lost packet does on a
 * real link; the other connections pass.
 * - arm(prefix): the first connection to send a SET of a key with that prefix keeps its bytes
 *   (that SET and whatever follows on it) until release(). A held connection that closes sends
 *   what it kept first, as TCP delivers what was sent before its FIN.
 * - armReplies(text): the first connection to send a command holding text has Redis's replies
 *   held from then on (the command has run: e.g. a purge's pick script, its entries gone)
 *   until release().
 */
const net = require('node:net');

async function startRelay(redisPort) {
    const held = [];
    let armed = null; /* {text, replies} */
    const sockets = new Set();
    const server = net.createServer((client) => {
        const up = net.connect(redisPort, '127.0.0.1');
        sockets.add(client).add(up);
        const conn = {queue: null, replies: false, client, up};
        client.on('data', (chunk) => {
            if (conn.queue === null && armed !== null && chunk.includes(armed.text) &&
                (armed.replies || chunk.includes('\r\nSET\r\n'))) {
                conn.replies = armed.replies;
                armed = null;
                conn.queue = [];
                held.push(conn);
            }
            if (conn.queue !== null && !conn.replies)
                conn.queue.push(chunk);
            else
                up.write(chunk);
        });
        up.on('data', (chunk) => (conn.queue !== null && conn.replies ? conn.queue.push(chunk) : client.write(chunk)));
        client.on('close', () => {
            if (!conn.replies)
                for (const chunk of conn.queue || [])
                    up.write(chunk);
            conn.queue = null;
            up.end();
        }).on('error', () => client.destroy());
        up.on('close', () => client.destroy()).on('error', () => up.destroy());
    });
    await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
    return {
        url: `redis://127.0.0.1:${server.address().port}/0`,
        /* Hold the next connection that sends a SET of a key starting with prefix. */
        arm(prefix = 'pc:2:e:') { armed = {text: prefix, replies: false}; },
        /* Hold the replies to the next connection that sends a command holding text. */
        armReplies(text) { armed = {text, replies: true}; },
        holding() { return held.length; },
        release() {
            for (const conn of held.splice(0)) {
                for (const chunk of conn.queue || [])
                    (conn.replies ? conn.client : conn.up).write(chunk);
                conn.queue = null;
            }
        },
        async close() {
            for (const sk of sockets)
                sk.destroy();
            await new Promise((resolve) => server.close(resolve));
        },
    };
}

module.exports = {startRelay};
