/* src/gen/kite_tables.c -- build/kite-tables: prints the docs' tables from the tables the
 * library itself is built from (src/options.c's option table, src/visit.c's statistics field
 * table), so the docs cannot say something else. tools/gen_tables.py puts its output between
 * markers in README.md, docs/design.md, docs/stats.md and man/kite.3, and checks it there.
 *
 *   kite-tables options-md    the options as a markdown table
 *   kite-tables options-man   the options as kite(3)'s ENVIRONMENT entries (troff)
 *   kite-tables stats-md      the statistics fields as a markdown table
 *
 * It reads the core's internal tables (linked with kite-noover), so it lives with the core
 * (src/gen/: a program of the core's build, in no library and in no layer), not with tools/,
 * which use the public API only.
 */
#include <stdio.h>
#include <string.h>
#include "options.h"
#include "visit.h"

/* A doc line for troff: `code` in bold, *text* in italics, [text](link) as text, '-' and
 * '\' escaped. */
static void man_text(const char *s) {
  bool code = false, ital = false;
  for (; *s; s++) {
    if (*s == '`') { fputs(code ? "\\fR" : "\\fB", stdout); code = !code; }
    else if (*s == '*' && !code) { fputs(ital ? "\\fR" : "\\fI", stdout); ital = !ital; }
    else if (*s == '[' && !code && strstr(s, "](")) { /* the link's text only */
      const char *close = strstr(s, "](");
      fwrite(s + 1, 1, (size_t)(close - s - 1), stdout);
      const char *end = strchr(close, ')');
      s = end ? end : close + 1;
    }
    else if (*s == '-') fputs("\\-", stdout);
    else if (*s == '\\') fputs("\\e", stdout);
    else putchar(*s);
  }
}

/* What the environment accepts: the words, or the range. */
static void accepted(const kite_opt_desc_t *d, bool man) {
  if (d->parser == KITE_OPT_WORDS) {
    fputs("one of ", stdout);
    for (const kite_opt_word_t *w = d->words; w->word; w++)
      printf(man ? "%s%s" : "%s`%s`", w == d->words ? "" : ", ", w->word);
  } else {
    printf(man ? "a whole number in %lld \\(en %lld" : "a whole number in %lld .. %lld", (long long)d->min,
           (long long)d->max);
  }
}

static void options_md(void) {
  puts("| variable | default | accepts (environment; `kite_option_set`) | meaning |");
  puts("|---|---|---|---|");
  for (unsigned o = 0; o < KITE_OPT_COUNT; o++) {
    const kite_opt_desc_t *d = &_kite_opt_desc[o];
    printf("| `%s` | %lld | ", d->env, (long long)d->dflt);
    accepted(d, false);
    printf("; %lld .. %lld | %s", (long long)d->min, (long long)d->max, d->doc);
    if (d->mallopt) printf(". `mallopt`: %s", d->mallopt);
    puts(" |");
  }
}

static void options_man(void) {
  for (unsigned o = 0; o < KITE_OPT_COUNT; o++) {
    const kite_opt_desc_t *d = &_kite_opt_desc[o];
    printf(".TP\n.B %s\n(default %lld; ", d->env, (long long)d->dflt);
    accepted(d, true);
    printf("; through\n.BR kite_option_set :\n%lld \\(en %lld)\n", (long long)d->min, (long long)d->max);
    man_text(d->doc);
    if (d->mallopt) { fputs(".\n.BR mallopt :\n", stdout); man_text(d->mallopt); }
    putchar('\n');
  }
  puts(".PP\nNot options, and left alone by the start\\-up check of unknown names: the variables of kite's\n"
       "tools, tests and other modules (a name ending in _ stands for every name it begins):");
  for (const char *const *p = _kite_env_other; *p; p++) printf(".B %s\n", *p);
}

static void stats_md(void) {
  puts("| JSON | text label | meaning | `kite_stats_t` | `mallinfo2` | `malloc_info` |");
  puts("|---|---|---|---|---|---|");
  static const char *const get_names[] = {
    "small_allocs", "large_allocs", "huge_allocs", "remote_frees", "invalid_frees", "committed", "peak_committed",
    "purged", "arenas", "live_blocks", "live_bytes", "small_live_blocks", "small_live_bytes", "small_pages",
    "large_live_blocks", "large_live_bytes", "huge_live_blocks", "huge_live_bytes", "pages_abandoned", "pages_adopted",
  };
  _Static_assert(sizeof get_names / sizeof get_names[0] == KITE_STAT_COUNT, "a name for each kite_stats_t field");
  for (unsigned i = 0; i < KITE_STAT_COUNT; i++) {
    const kite_stat_field_t *f = &_kite_stat_fields[i];
    printf("| `%s%s%s` | %s | %s | `%s` | %s | %s |\n", f->group, *f->group ? "." : "", f->key, f->label, f->doc,
           get_names[f->get / sizeof(unsigned long long)], f->mallinfo2 ? f->mallinfo2 : "",
           f->malloc_info ? f->malloc_info : "");
  }
}

int main(int argc, char **argv) {
  const char *usage = "usage: kite-tables options-md|options-man|stats-md\n";
  if (argc == 2 && strcmp(argv[1], "options-md") == 0) options_md();
  else if (argc == 2 && strcmp(argv[1], "options-man") == 0) options_man();
  else if (argc == 2 && strcmp(argv[1], "stats-md") == 0) stats_md();
  else if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) fputs(usage, stdout);
  else { fputs(usage, stderr); return 2; }
  return 0;
}
