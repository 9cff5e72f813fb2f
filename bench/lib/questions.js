'use strict';
/*
 * bench/lib/questions.js - deterministic, distinct questions and their
 * rewordings (lower case, no punctuation: a semantic hit with the builtin
 * embedder), as in bench/semantic-speed, and the chat bodies that carry them.
 */
const WORDS = ('time year people way day man thing woman life child world school state family ' +
    'student group country problem hand part place case week company system program question work ' +
    'government number night point home water room mother area money story fact month lot right ' +
    'study book eye job word business issue side kind head house service friend father power hour ' +
    'game line end member law car city community name president team minute idea kid body ' +
    'information back parent face others level office door health person art war history party ' +
    'result change morning reason research girl guy moment air teacher force education').split(' ');

function question(i) {
    let x = (i + 1) * 2654435761 >>> 0;
    const pick = () => {
        x = (x * 1664525 + 1013904223) >>> 0;
        return WORDS[x % WORDS.length];
    };
    return `How does the ${pick()} of a ${pick()} change the ${pick()} and ${pick()} in case ${i}?`;
}

const reword = (q) => q.toLowerCase().replace(/[?,.]/g, '');

/* The request body, as one JSON line; partitions > 1 spreads questions over system prompts. */
function chatBody(i, partitions, text) {
    const system = partitions > 1 ? `You answer for team ${i % partitions}.` : 'You answer briefly.';
    return JSON.stringify({model: 'gpt-4o-mini', messages: [{role: 'system', content: system},
        {role: 'user', content: text}]});
}

module.exports = {question, reword, chatBody, WORDS};
