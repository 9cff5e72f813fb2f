/*
 * embed_asset.c - build-time helper: turns one file (the dashboard page)
 * into a C array, so the binary serves it without reading anything at run
 * time.
 *
 * usage: embed_asset NAME FILE > out.c
 *   defines const char NAME[] (NUL-terminated) and const size_t NAME_len.
 */
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: embed_asset NAME FILE > out.c\n");
        return 2;
    }
    FILE *f = fopen(argv[2], "rb");
    if (f == NULL) {
        perror(argv[2]);
        return 1;
    }
    printf("/* generated from %s by tools/embed_asset.c */\n#include <stddef.h>\n\n", argv[2]);
    printf("extern const char %s[];\nextern const size_t %s_len;\n", argv[1], argv[1]);
    printf("const char %s[] = {", argv[1]);
    size_t n = 0;
    int c;
    while ((c = fgetc(f)) != EOF)
        printf("%s%d", n == 0 ? "\n    " : n % 24 ? "," : ",\n    ", c), n++;
    printf("%s0};\nconst size_t %s_len = %zu;\n", n ? ",\n    " : "", argv[1], n);
    int bad = ferror(f);
    fclose(f);
    return bad ? 1 : 0;
}
