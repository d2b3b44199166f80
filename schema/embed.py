#!/usr/bin/env python3
"""Turn a text file into a C source defining `const char NAME[]` with its bytes."""
import sys

src, dst, name = sys.argv[1:4]
data = open(src, 'rb').read()
with open(dst, 'w') as out:
    out.write('/* Generated from %s by schema/embed.py: do not edit. */\n' % src.split('/')[-1])
    out.write('extern const char %s[];\n' % name)
    out.write('const char %s[] = {\n' % name)
    for i in range(0, len(data), 16):
        out.write('  ' + ', '.join('0x%02x' % b for b in data[i:i + 16]) + ',\n')
    out.write('  0x00\n};\n')
