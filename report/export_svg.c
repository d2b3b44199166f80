/*
 * export_svg.c - `--format svg`: the flame graph of flame.c as a standalone,
 * self-contained SVG document (inline CSS and script, no network), titled
 * with the export's title and the selection's totals.
 */
#include "flame.h"

int export_svg(struct ex_model *m, const struct trace_filter *filter,
               const struct export_options *opt, struct out *o)
{
        char subtitle[256];
        ex_model_describe(m, subtitle, sizeof(subtitle));
        struct flame_svg_opts so = {
            .title = opt->title ? opt->title : (opt->icicle ? "Icicle Graph" : "Flame Graph"),
            .subtitle = subtitle,
            .icicle = opt->icicle,
            .width = opt->width,
        };
        flame_write_svg(o, m, &so);
        return 0;
}
