'use strict';
/*
 * bench-client.js - N sequential POSTs of one request on one keep-alive
 * connection (for bench/instructions.sh, which counts the proxy's
 * instructions around it). usage: bench-client.js BASE PATH N [HEADERS-JSON] [unique]
 * A chat question, or for a PATH ending in /embeddings an input asking for
 * 1536 dimensions (the size of text-embedding-3-small's vectors).
 * With "unique" each request asks a new question (a cache miss every time);
 * "stream" is the same with "stream": true (the answer relayed as SSE).
 */
const http = require('node:http');

const [base, path, n, extra, mode] = process.argv.slice(2);
const salt = `${process.pid}-${Date.now()}`;
const question = (i) => 'What is the capital of France? Answer in one word.' +
    (mode === 'unique' || mode === 'stream' ? ` (${salt}-${i})` : '');
const bodyOf = (i) => JSON.stringify(path.endsWith('/embeddings')
    ? {model: 'text-embedding-3-small', input: question(i), dimensions: 1536}
    : {model: 'gpt-4o-mini', temperature: 0, ...(mode === 'stream' ? {stream: true} : {}), messages: [
        {role: 'system', content: 'You are a helpful assistant.'},
        {role: 'user', content: question(i)}]});
const agent = new http.Agent({keepAlive: true, maxSockets: 1});
const headers = {'content-type': 'application/json', authorization: 'Bearer sk-bench',
    ...JSON.parse(extra || '{}')};

function once(i) {
    return new Promise((resolve, reject) => {
        const req = http.request(base + path, {method: 'POST', agent, headers}, (res) => {
            res.resume();
            res.on('end', () => (res.statusCode < 500 ? resolve() : reject(new Error(`status ${res.statusCode}`))));
        });
        req.on('error', reject);
        req.end(bodyOf(i));
    });
}

(async () => {
    for (let i = 0; i < Number(n); i++)
        await once(i);
    agent.destroy();
})().catch((e) => {
    console.error(`bench-client: ${e.message}`);
    process.exit(1);
});
