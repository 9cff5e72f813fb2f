'use strict';
/*
 * expect.js - assertions shared by the test files: cache outcome headers and
 * the error shapes of the two API dialects.
 */
const assert = require('node:assert/strict');

/* The answer came from the cache: status 200, exact match, an Age in seconds. */
function assertHit(res) {
    assert.equal(res.status, 200, `expected 200, got ${res.status}: ${res.text && res.text.slice(0, 300)}`);
    assert.equal(res.headers['x-cache-status'], 'HIT', 'X-Cache-Status');
    assert.equal(res.headers['x-cache-match'], 'exact', 'X-Cache-Match');
    assert.match(String(res.headers.age), /^\d+$/, 'Age header (seconds) on a HIT');
}

/* The answer came from the upstream (MISS, or another status such as REFRESH). */
function assertFromUpstream(res, mock, status = 'MISS') {
    assert.equal(res.headers['x-cache-status'], status, 'X-Cache-Status');
    assert.equal(res.headers['x-upstream'], `127.0.0.1:${mock.port}`, 'X-Upstream names the replica');
}

function assertOpenAIError(res, status) {
    assert.equal(res.status, status, `status (body: ${res.text.slice(0, 300)})`);
    assert.match(String(res.headers['content-type']), /application\/json/);
    const e = res.json && res.json.error;
    assert.ok(e && typeof e === 'object', `OpenAI error shape {"error":{...}}: ${res.text.slice(0, 300)}`);
    assert.equal(typeof e.message, 'string');
    assert.ok(e.message.length > 0, 'error.message is not empty');
    assert.equal(typeof e.type, 'string');
}

function assertAnthropicError(res, status) {
    assert.equal(res.status, status, `status (body: ${res.text.slice(0, 300)})`);
    assert.match(String(res.headers['content-type']), /application\/json/);
    const j = res.json;
    assert.ok(j && j.type === 'error' && j.error && typeof j.error === 'object',
        `Anthropic error shape {"type":"error","error":{...}}: ${res.text.slice(0, 300)}`);
    assert.equal(typeof j.error.type, 'string');
    assert.equal(typeof j.error.message, 'string');
    assert.ok(j.error.message.length > 0, 'error.message is not empty');
}

/* Error in the shape of the API the path belongs to. */
function assertApiError(res, reqPath, status) {
    if (reqPath.startsWith('/v1/messages'))
        assertAnthropicError(res, status);
    else
        assertOpenAIError(res, status);
}

/* The mock's call sequence number quoted in an answer text ("mock answer #7 to: ..."). */
function answerSeq(text) {
    const m = /mock answer #(\d+)/.exec(text || '');
    assert.ok(m, `not a mock answer: ${String(text).slice(0, 100)}`);
    return Number(m[1]);
}

const chatText = (json) => json.choices[0].message.content;
const messageText = (json) => json.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

module.exports = {
    assertHit, assertFromUpstream, assertOpenAIError, assertAnthropicError, assertApiError,
    answerSeq, chatText, messageText,
};
