/*
 * donto-accel: BERT WordPiece tokenizer (BasicTokenizer + WordPiece), token
 * for token equal to Hugging Face's BertTokenizer / tokenizers' BertNormalizer
 * + BertPreTokenizer + WordPiece for uncased BERT vocabularies.
 *
 * Pipeline for one text (what HF does, in the same order):
 *   1. clean: drop U+0000, U+FFFD and control characters (Cc/Cf except
 *      \t \n \r), map every whitespace character to ' '.
 *   2. put spaces around CJK ideographs.
 *   3. lowercase, then NFD and drop combining marks (Mn) -- only when
 *      lowercase is on (strip_accents follows lowercase, as in HF).
 *   4. split on whitespace, then split off every punctuation character
 *      (ASCII symbol ranges + Unicode P* categories) as its own word.
 *   5. WordPiece: greedy longest match with "##" continuations; a word with
 *      no full match, or longer than max_input_chars_per_word (100)
 *      characters, becomes [UNK].
 *   6. [CLS] ids [SEP], truncated to max_len ids in total.
 *
 * Invalid UTF-8: every byte that does not start a well-formed UTF-8 sequence
 * is treated as U+FFFD and therefore removed by step 1. This equals decoding
 * the bytes with Python's errors="replace" and tokenizing the result.
 *
 * A donto_tokenizer is immutable after open: any number of threads may call
 * donto_tokenizer_encode on it at once.
 */
#ifndef DONTO_TOKENIZER_H
#define DONTO_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "donto/util.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct donto_tokenizer donto_tokenizer;

typedef struct donto_tokenizer_opts {
    int lowercase;                /* 1 (default): uncased BERT */
    int strip_accents;            /* -1 (default): follow lowercase; 0 or 1 to force */
    int tokenize_cjk;             /* 1 (default): spaces around CJK ideographs */
    int max_input_chars_per_word; /* 100 (default) */
} donto_tokenizer_opts;

void donto_tokenizer_default_opts(donto_tokenizer_opts *opts);

/* Load a vocab.txt (one token per line, id = line number). opts may be NULL
 * for the defaults. The vocabulary must contain [CLS], [SEP], [UNK], [PAD]. */
int donto_tokenizer_open(const char *vocab_path, const donto_tokenizer_opts *opts,
                         donto_tokenizer **out, donto_err *err);
void donto_tokenizer_close(donto_tokenizer *tok);

/* Tokenize text[0..len) (need not be NUL-terminated) into ids: [CLS] ...
 * [SEP], at most max_len ids in total (max_len >= 2; longer inputs are
 * truncated to their first max_len-2 word pieces). Returns the number of ids
 * written (>= 2). */
int donto_tokenizer_encode(const donto_tokenizer *tok, const char *text, size_t len,
                           int32_t *ids, int max_len);

int donto_tokenizer_vocab_size(const donto_tokenizer *tok);
/* Id of a vocabulary entry, or -1. */
int32_t donto_tokenizer_token_id(const donto_tokenizer *tok, const char *token);
/* Text of an id, or NULL when out of range. */
const char *donto_tokenizer_token(const donto_tokenizer *tok, int32_t id);

int32_t donto_tokenizer_cls_id(const donto_tokenizer *tok);
int32_t donto_tokenizer_sep_id(const donto_tokenizer *tok);
int32_t donto_tokenizer_unk_id(const donto_tokenizer *tok);
int32_t donto_tokenizer_pad_id(const donto_tokenizer *tok);

#ifdef __cplusplus
}
#endif
#endif
