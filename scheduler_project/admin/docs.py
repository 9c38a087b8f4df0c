"""The project's documentation (docs/*.md) as portal pages, so a page can link to the section that explains it.

`/admin/docs/<name>.md` renders docs/<name>.md (CommonMark and tables, by
markdown-it-py; raw HTML in a page is shown as text, never run), with an
`id` on each heading as GitHub makes them (`## Jitter by default` is
`#jitter-by-default`), so the links between the docs (`dst.md#...`) work
here as they do in the repository. Behind the portal's login like every
page; only files directly in docs/ are served.
"""

import functools
import re
from pathlib import Path

from django.conf import settings
from django.http import Http404
from django.template.response import TemplateResponse
from django.utils.safestring import mark_safe
from markdown_it import MarkdownIt

NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


def docs_dir():
    return Path(settings.BASE_DIR) / "docs"


def anchor(text):
    """A heading's id as GitHub makes it: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@functools.lru_cache(maxsize=64)
def rendered(path, mtime):
    """(title, HTML) of a docs page; cached per file and modification time."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(Path(path).read_text(encoding="utf-8"))
    title = Path(path).stem
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            text = tokens[i + 1].content
            token.attrSet("id", anchor(text))
            if token.tag == "h1" and title == Path(path).stem:
                title = text
    return title, md.renderer.render(tokens, md.options, {})


def doc_page(request, name, *, site):
    """The page docs/<name>.md, or 404."""
    path = docs_dir() / f"{name}.md"
    if not NAME.fullmatch(name) or not path.is_file():
        raise Http404("No such page in docs/.")
    title, html = rendered(str(path), path.stat().st_mtime)
    context = {**site.each_context(request), "title": title, "doc_name": name, "body": mark_safe(html)}
    return TemplateResponse(request, "portal/doc.html", context)
