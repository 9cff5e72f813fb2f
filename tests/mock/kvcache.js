'use strict';
/*
 * kvcache.js - the model of a vLLM engine's automatic prefix cache that the
 * mock replica (vllm.js) runs, and the tokeniser it counts with. Pure: no
 * I/O, no timers, so the benchmark can reuse the same arithmetic.
 *
 * Tokeniser: the rendered prompt's UTF-8 bytes, TOKEN_BYTES (4) bytes to a
 * token; a last partial group is one more token. Deliberately simple, so a
 * client can write a prompt of exactly N tokens (4N ASCII bytes).
 *
 * Chat template (renderChat): every message becomes "<|ROLE|>\n" + its text
 * + "\n", in order; content parts of type "text" are joined with "\n". A
 * completion's prompt is used as it is.
 *
 * Blocks: the prompt is cut into blocks of blockTokens tokens (vLLM: 16);
 * only full blocks are cached. A block is named by a chained hash, SHA-1 of
 * (parent block's hash ‖ block bytes), rooted at the request's cache_salt, so
 * equal names mean equal prefixes and different salts never share a block.
 *
 *   lookup(hashes) ─ longest run of leading blocks present ─▶ cached tokens
 *   acquire(hashes) ─ every block referenced (new ones inserted) ─▶ evict LRU
 *   release(hashes) ─ refs dropped; unreferenced blocks join the LRU queue,
 *                     the tail of the prompt first so its head stays longest
 *
 * Capacity is in blocks; blocks held by running requests are never evicted,
 * so the cache may exceed capacity while they run (counted as overflow),
 * where a real engine would preempt or queue.
 */
const crypto = require('node:crypto');

const TOKEN_BYTES = 4;
const DEFAULT_BLOCK_TOKENS = 16;

/* Tokens in a string or buffer: ceil(bytes / TOKEN_BYTES). */
function countTokens(text) {
    const n = Buffer.isBuffer(text) ? text.length : Buffer.byteLength(String(text));
    return Math.ceil(n / TOKEN_BYTES);
}

/* The text of a message's content: a string, or the text parts of an array. */
function contentText(content) {
    if (typeof content === 'string')
        return content;
    if (Array.isArray(content))
        return content.map((p) => (p && typeof p.text === 'string' ? p.text : '')).join('\n');
    return '';
}

/* The fixed chat template (see the top of this file). */
function renderChat(messages) {
    return messages.map((m) => `<|${m && m.role ? m.role : 'user'}|>\n${contentText(m && m.content)}\n`)
        .join('');
}

/* The prompt text of a chat or completions request body. */
function renderPrompt(body) {
    if (Array.isArray(body.messages))
        return renderChat(body.messages);
    return [].concat(body.prompt === undefined ? '' : body.prompt).map(String).join('');
}

/* Chained hashes of the full blocks of prompt (a Buffer). */
function blockHashes(prompt, blockTokens = DEFAULT_BLOCK_TOKENS, salt = '') {
    const blockBytes = blockTokens * TOKEN_BYTES;
    const out = [];
    let parent = salt ? crypto.createHash('sha1').update(`salt:${salt}`).digest() : Buffer.alloc(0);
    for (let at = 0; at + blockBytes <= prompt.length; at += blockBytes) {
        parent = crypto.createHash('sha1').update(parent).update(prompt.subarray(at, at + blockBytes))
            .digest();
        out.push(parent.toString('base64'));
    }
    return out;
}

/*
 * Blocks are nodes {hash, refs, prev, next} in one Map; the unreferenced
 * ones are also on a doubly linked list, least recently used at the head, so
 * eviction is O(1) (deleting a Map's oldest key and asking for the next one
 * is not: V8 skips the deleted entries each time).
 */
class PrefixCache {
    /* capacityBlocks: how many blocks may stay cached (at least 1). */
    constructor(capacityBlocks, blockTokens = DEFAULT_BLOCK_TOKENS) {
        this.capacityBlocks = Math.max(1, Math.floor(capacityBlocks));
        this.blockTokens = blockTokens;
        this.clear();
    }

    clear() {
        this.blocks = new Map(); /* hash -> node */
        this.head = null; /* least recently used unreferenced block */
        this.tail = null;
        this.evictable = 0;
        this.evicted = 0;
        this.peakBlocks = 0;
        this.overflowBlocks = 0; /* most blocks held beyond capacity at once */
    }

    get usedBlocks() {
        return this.blocks.size;
    }

    /*
     * Cached tokens for a prompt of promptTokens tokens with these block
     * hashes: the leading blocks present, at most up to the last token (the
     * engine always computes at least one token, as vLLM does).
     */
    lookup(hashes, promptTokens) {
        const limit = Math.min(hashes.length, Math.floor(Math.max(0, promptTokens - 1) / this.blockTokens));
        let n = 0;
        while (n < limit && this.blocks.has(hashes[n]))
            n++;
        return n * this.blockTokens;
    }

    /* A running request now holds every block of hashes; evicts down to capacity. */
    acquire(hashes) {
        for (const h of hashes) {
            let node = this.blocks.get(h);
            if (node === undefined) {
                node = {hash: h, refs: 0, prev: null, next: null};
                this.blocks.set(h, node);
            } else if (node.refs === 0) {
                this._unlink(node);
            }
            node.refs++;
        }
        this._evict();
        this.peakBlocks = Math.max(this.peakBlocks, this.blocks.size);
        this.overflowBlocks = Math.max(this.overflowBlocks, this.blocks.size - this.capacityBlocks);
    }

    /* The request that acquired hashes is done with them. */
    release(hashes) {
        for (let i = hashes.length - 1; i >= 0; i--) {
            const node = this.blocks.get(hashes[i]);
            if (node === undefined || node.refs === 0)
                continue; /* the cache was cleared meanwhile */
            if (--node.refs === 0)
                this._append(node);
        }
        this._evict();
    }

    _append(node) {
        node.prev = this.tail;
        node.next = null;
        if (this.tail)
            this.tail.next = node;
        else
            this.head = node;
        this.tail = node;
        this.evictable++;
    }

    _unlink(node) {
        if (node.prev)
            node.prev.next = node.next;
        else
            this.head = node.next;
        if (node.next)
            node.next.prev = node.prev;
        else
            this.tail = node.prev;
        node.prev = node.next = null;
        this.evictable--;
    }

    _evict() {
        while (this.blocks.size > this.capacityBlocks && this.head !== null) {
            const oldest = this.head;
            this._unlink(oldest);
            this.blocks.delete(oldest.hash);
            this.evicted++;
        }
    }

    stats() {
        return {
            block_tokens: this.blockTokens,
            capacity_blocks: this.capacityBlocks,
            capacity_tokens: this.capacityBlocks * this.blockTokens,
            used_blocks: this.blocks.size,
            evictable_blocks: this.evictable,
            evicted_blocks: this.evicted,
            peak_blocks: this.peakBlocks,
            overflow_blocks: Math.max(0, this.overflowBlocks),
        };
    }
}

module.exports = {
    TOKEN_BYTES, DEFAULT_BLOCK_TOKENS, countTokens, contentText, renderChat, renderPrompt,
    blockHashes, PrefixCache,
};
