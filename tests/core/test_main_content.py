""""auto" mode on pages that declare themselves articles: the article, without what surrounds it."""

from __future__ import annotations

import pytest

from scrapy_neardup.core.main_content import MIN_MAIN_WORDS, SCRIPT_SHELL_BYTES, is_article_page
from scrapy_neardup.core.sketch import Sketcher

STORY = ("The city council voted on Tuesday to extend the river walk by two miles, a plan that residents have argued "
         "about for a decade. Supporters said the path would bring visitors to the old mill district. Opponents "
         "worried about the cost, which the council put at four million dollars over five years.")
OG = '<meta property="og:type" content="article">'


def page(body: str, head: str = OG) -> str:
    return f"<html><head><title>News</title>{head}</head><body>{body}</body></html>"


def text(html: str) -> str:
    return Sketcher().text(html).decode()


@pytest.mark.parametrize(("head", "body", "declared"), [
    (OG, "<p>x</p>", True),
    ('<script type="application/ld+json">{"@type": "NewsArticle"}</script>', "<p>x</p>", True),
    ('<script type="application/ld+json">{"@type":"BlogPosting"}</script>', "<p>x</p>", True),
    ("", "<article><p>x</p></article>", True),
    ('<meta property="og:type" content="website">', "<main><p>x</p></main>", False),
    ("", "<div class=articles><p>x</p></div>", False),
])
def test_pages_that_declare_themselves_articles(head: str, body: str, declared: bool) -> None:
    assert is_article_page(page(body, head).encode()) is declared


def test_comments_share_blocks_and_bylines_go_inside_and_outside_the_article() -> None:
    comments = "".join(f"<div class=comment><p>Reader {i} says the council should pave it instead.</p></div>"
                       for i in range(8))
    html = page(
        f"<header class=site-header><a href=/>Daily Planet</a></header>"
        f"<article><h1>River walk to grow</h1><div class=byline>By Jane Roe, 148,531 views</div><p>{STORY}</p>"
        f"<div class=share-buttons><a href=/f>Share on Facebook</a> <a href=/t>Share on Twitter</a></div>"
        f"<section id=comments class=comments>{comments}</section></article>"
        f"<aside><h2>Trending</h2><p>Something else entirely</p></aside>")
    out = text(html)
    assert "council voted" in out and "river walk to grow" in out
    for gone in ("reader", "share on", "148 531", "daily planet", "trending"):
        assert gone not in out, gone


def test_an_article_and_its_copy_with_a_comment_thread_are_one_page() -> None:
    plain = page(f"<article><h1>River walk</h1><p>{STORY}</p></article>")
    thread = "".join(f"<li class=comment>Reader {i} wrote a long reply about parking and the mill.</li>"
                     for i in range(30))
    commented = page(f"<article><h1>River walk</h1><p>{STORY}</p></article><ol class=comment-list>{thread}</ol>")
    assert Sketcher().jaccard(plain, commented) == 1.0


def test_lists_inside_the_article_stay() -> None:
    items = "".join(f"<li>Step {i}: fold the paper along line {i} and press it flat</li>" for i in range(5))
    out = text(page(f"<article><p>{STORY}</p><ul>{items}</ul></article>"))
    assert "step 4 fold the paper along line 4" in out


def test_an_empty_xhtml_anchor_does_not_make_the_rest_link_text() -> None:
    html = page(f'<div><h2><a id="s1"/>Section one</h2><p>{STORY}</p><p>{STORY.upper()}</p></div>')
    assert text(html).count("council voted") == 2


def test_a_page_whose_main_content_is_short_is_read_whole() -> None:
    html = page('<div class=site-footer><p>Uses of Widget: no usage of Widget in this library</p></div>')
    out = text(html)
    assert len(out.split()) >= MIN_MAIN_WORDS - 1 and "no usage of widget" in out


def test_an_article_pages_removed_share_counts_the_comment_thread_it_left_out() -> None:
    """An article's extraction leaves text out inside the page too (here a comment thread): the page's words are
    its visible words (scripts aside), so the evidence's share removed counts the thread."""
    thread = "".join(f"<li class=comment>Reader {i} wrote a long reply about parking</li>" for i in range(10))
    head = f'{OG}<script>var tracking = "{"x " * 200}";</script>'
    plain = page(f"<article><h1>River walk</h1><p>{STORY}</p></article>", head)
    commented = page(f"<article><h1>River walk</h1><p>{STORY}</p></article><ol class=comment-list>{thread}</ol>",
                     head)
    story_words = 2 + len(STORY.replace(",", " ").replace(".", " ").split())  # the heading, then the story
    thread_words = 10 * 8  # "reader N wrote a long reply about parking"
    a, b = Sketcher().sketch_many([plain, commented])
    assert (a.sketched, a.words, a.page_words, a.removed) == ("main content", story_words, story_words, 0.0)
    assert (b.words, b.page_words) == (story_words, story_words + thread_words)
    assert b.removed == round(1 - story_words / (story_words + thread_words), 2)


# Passages of prose: the widgets that class names do not give away (names here say nothing: c1, c2...).
PARAGRAPHS = [
    "The county board approved a budget on Monday that raises spending on roads and bridges by nine percent, "
    "the largest increase since the recession, after a meeting that ran late into the night.",
    "Board members said the money would go first to the three bridges inspectors rated as poor last spring, "
    "including the span over the creek that carries most of the traffic into the town centre.",
    "Residents who spoke at the meeting were divided, with some asking for more money for the library and the "
    "parks while others said the roads had waited long enough and should come before anything else.",
    "The budget also sets aside money for two new snow ploughs and a salt barn, which the roads department has "
    "asked for since the old barn was damaged in a storm three winters ago.",
]
ARTICLE = "".join(f"<p>{p}</p>" for p in PARAGRAPHS)


def _widgets(n: int) -> str:
    """A date line, a share bar, a comment count and related-story teasers that differ from page to page."""
    teasers = "".join(f"<li><a href=/s{n}{i}>Headline number {n}{i} of another story today</a><p>Teaser {n}{i} of "
                      f"another story that says something else about another place in twenty or so words.</p></li>"
                      for i in range(3))
    return (f"<div class=c1>Updated November {n}, 2026 at {n}:15 pm</div>"
            f"<div class=c2><a href=/f>Facebook</a> <a href=/t>Twitter</a> <a href=/e>Email</a></div>",
            f"<div class=c3><a href=#c>{n * 7 + 3} comments</a></div><div class=c4><h3>Related stories</h3>"
            f"<ul>{teasers}</ul></div>")


def test_an_article_and_its_print_copy_are_one_page_whatever_widgets_surround_it() -> None:
    before, after = _widgets(1)
    served = page(f"<div class=c5><a href=/>Home</a> <a href=/news>News</a></div>{before}<div class=c6><h1>Roads "
                  f"budget</h1>{ARTICLE}</div>{after}", head="")
    before, after = _widgets(2)
    again = page(f"{before}<div class=c6><h1>Roads budget</h1>{ARTICLE}</div>{after}", head=OG)
    printed = page(f"<div class=p1><a href='javascript:print()'>Print this page</a> <a href=#>Close window</a></div>"
                   f"<h1>Roads budget</h1>{ARTICLE}<div class=p2>Find this article at: https://example.org/roads "
                   f"Copyright 2026 example.org. All rights reserved.</div>", head="")
    out = text(served)
    assert out == text(printed)
    # The article page marks nothing and its extraction keeps the widgets, so it is read in its paragraph column;
    # without link text the column is not cut to its passages of prose, and its heading stays.
    assert text(again) == "roads budget " + out
    assert Sketcher().jaccard(again, printed) >= 0.9
    assert "county board approved" in out and "salt barn" in out
    for gone in ("updated november", "comments", "teaser", "print this page", "all rights reserved"):
        assert gone not in out, gone


def test_distinct_articles_under_one_long_sidebar_blurb_stay_distinct() -> None:
    """A sidebar's paragraph (an "about us" blurb) longer than a short post's lines is not taken for the post."""
    blurb = ("<div class=c7><p>The Valley Gazette has covered the towns of the upper valley since 1921, with reporters "
             "in every county seat, a newsroom that answers to its readers and nobody else, and a weekly edition that "
             "still goes to every farm on the rural routes, as it did when the paper was founded by the Miller "
             "family.</p><a href=/about>About us</a></div>")
    stories = [f"<div class=c6><p>{first}</p><p>{second}</p></div>" for first, second in
               (("Snow closed the pass.", "Crews expect to reopen it by noon."),
                ("The mill fire is out.", "Nobody was hurt, the fire chief said."))]
    one, two = (page(story + blurb, head="") for story in stories)
    assert "snow closed the pass" in text(one) and "mill fire" in text(two)
    # Both posts say the blurb: alike, but not near-duplicates (the default threshold is 0.9).
    assert Sketcher().jaccard(one, two) < 0.8


def test_a_web_address_written_out_is_link_text_not_prose() -> None:
    """A print footer naming the article's address, whose slug is as long as a paragraph: the address is read as a
    link, so the footer is not taken for a paragraph of the article (it would be, read by its words)."""
    slug = "county-board-approves-roads-budget-with-two-new-snow-ploughs-and-a-salt-barn-after-a-long-debate-on-taxes"
    bare = (f"<div class=p1><a href='javascript:print()'>Print this page</a></div><h1>Roads budget</h1>{ARTICLE}")
    printed = page(f"{bare}<div class=p2>Find this article at:<br>https://www.example.org/news/2026/11/{slug}"
                   f"<br>Copyright 2026 example.org. All rights reserved.</div>", head="")
    assert text(printed) == text(page(bare, head=""))
    assert "county board approved" in text(printed) and "find this article" not in text(printed)


SECOND = ("Engineers from the county will survey the banks in spring. The first mile should open the following summer, "
          "with benches, lights and a bridge over the mill race that the old path never crossed.")


@pytest.mark.parametrize("head", [OG, ""], ids=["article page", "page that declares nothing"])
@pytest.mark.parametrize("part", ["main", "article"])
def test_a_header_or_footer_inside_the_main_content_is_part_of_it(head: str, part: str) -> None:
    # Some site builders put a whole post inside a <header> of the <main> part; a <header> or <footer> there is
    # that part's own (HTML-AAM: banner and contentinfo only outside main and article), the page's banner is not.
    html = page(f"<header class=site><a href=/>Daily Planet</a> <a href=/news>News</a> Read all about it today</header>"
                f"<{part}><header class=post-landing><h1>River walk to grow</h1><p>{STORY}</p></header>"
                f"<p>By Jane Roe</p><footer class=post-end><p>{SECOND}</p></footer></{part}>"
                f"<footer class=site>Copyright Daily Planet, every right reserved, since nineteen thirty</footer>",
                head)
    out = text(html)
    assert "council voted" in out and "engineers from the county" in out
    for gone in ("read all about it", "every right reserved"):
        assert gone not in out, gone


def test_a_pictures_caption_and_credit_go() -> None:
    html = page(f"<article><p>{STORY}</p><figure><img src=walk.jpg alt='The river walk at dawn'>"
                "<figcaption>Walkers on the east bank on Sunday</figcaption><span>Photo: Jane Roe, AP</span></figure>"
                f"<p>{SECOND}</p></article>")
    out = text(html)
    assert "council voted" in out and "engineers from the county" in out
    for gone in ("river walk at dawn", "walkers on the east bank", "jane roe"):
        assert gone not in out, gone


MORE = ("The river walk opened in 1998 with a single mile along the east bank. Its second mile, built in 2006, "
        "crossed the water on the old rail bridge and doubled the number of people who walk it every week.")
PARAGRAPHS = "".join(f"<p>{sentence}.</p>" for sentence in f"{STORY} {MORE}".rstrip(".").split(". "))


def test_an_article_wrapped_in_a_share_container_is_still_read() -> None:
    """A theme that opens its share buttons' ``<div class="share-container">`` and closes it after the article: the
    extraction's rules take the whole element for a share block, and keep only the headline (more than
    :data:`MIN_MAIN_WORDS` words: it is trusted). The page's paragraph body is read instead."""
    html = page(
        "<div role=main><article><header><h1>River walk to grow by two miles as the council backs a plan argued "
        "over for a decade</h1></header>"
        f"<div class=share-container><aside class=share><a href=/f>Facebook</a></aside>"
        f"<div class=post-content>{PARAGRAPHS}</div></div></article></div>")
    out = text(html)
    assert "council voted on tuesday" in out and "four million dollars" in out
    # With a comment thread after it, the headline alone is short of an article: the thread is not read for it, as
    # it would be on a forum topic, because the paragraph body is not in it.
    thread = "".join(f"<div class=comment><p>Reader {i} says the council should pave the old towpath instead of "
                     f"building a new one.</p></div>" for i in range(4))
    out = text(html.replace("</article>", f"</article><section class=comments>{thread}</section>"))
    assert "council voted on tuesday" in out and "reader" not in out


def test_an_article_before_a_main_element_that_holds_something_else_is_read() -> None:
    """A ``<main>`` around a call to action, the article before it: the marked part leaves out the page's paragraph
    body and says less, so the page is read whole."""
    html = page(f"<div class=content><h1>River walk to grow</h1>{PARAGRAPHS}</div>"
                "<main><h2>Book a demo</h2><p>Talk to our team about your city's parks today.</p></main>")
    out = text(html)
    assert "council voted on tuesday" in out and "four million dollars" in out


def test_a_long_comment_is_not_read_for_a_short_article() -> None:
    """The paragraph body the extraction leaves out as a comment thread stays out: a long comment in several
    paragraphs is not taken for the article."""
    reply = "".join(f"<p>I have lived by the mill for {i} years and the path will never pay for itself, "
                    f"whatever the council says about visitors and shops number {i}.</p>" for i in range(6))
    html = page(f"<article><h1>River walk</h1><p>{STORY}</p></article>"
                f"<section id=comments class=comments><div class=comment>{reply}</div></section>")
    out = text(html)
    assert "council voted" in out and "lived by the mill" not in out


def test_a_long_footer_blurb_is_not_read_for_a_short_article() -> None:
    blurb = "".join(f"<p>The Daily Planet has served the valley since 19{i}0, reporting on councils, courts, "
                    f"schools and the people who make the valley what it is, paragraph {i}.</p>" for i in range(6))
    html = page(f"<main><article><h1>River walk</h1><p>{STORY}</p></article></main><footer>{blurb}</footer>")
    out = text(html)
    assert "council voted" in out and "served the valley" not in out


@pytest.mark.parametrize("head", [OG, ""])
def test_several_main_elements_are_cards_not_the_main_content(head: str) -> None:
    """A page may have one ``<main>``: side by side, several are cards of teasers (here on an article page and on
    a page that declares nothing), and the page's text is read as if nothing were marked."""
    cards = "".join(f"<main class=card><h3>Guide {i}</h3><p>How headless systems work, part {i}</p></main>"
                    for i in range(2))
    html = page(f"<div class=post><h1>River walk to grow</h1>{PARAGRAPHS}</div>{cards}", head)
    out = text(html)
    assert "council voted on tuesday" in out and "four million dollars" in out


@pytest.mark.parametrize("head", [OG, ""])
def test_of_several_main_elements_the_one_that_holds_most_of_their_words_is_read(head: str) -> None:
    """A loading placeholder in a ``<main>`` of its own before the one that holds the article: the article's is the
    main content (it holds most of the words of both), and the menu beside them stays out."""
    menu = "".join(f"<li><a href=/s{i}>Section {i}</a></li>" for i in range(6))
    html = page(f"<div class=menu><ul>{menu}</ul></div><main><p>Loading the story</p></main>"
                f"<main><h1>River walk to grow</h1>{PARAGRAPHS}</main>", head)
    out = text(html)
    assert "council voted on tuesday" in out and "section 3" not in out
    assert Sketcher().sketch(html).sketched == "main content"  # read as what the page marks, not the whole page


def test_an_authors_long_bio_is_not_read_for_a_short_article() -> None:
    """Two long paragraphs of an author's bio say more than a short article, and the extraction leaves them out:
    a paragraph body has at least three paragraphs, so the bio is not read instead."""
    bio = "".join(f"<p>Jane Roe has covered the valley's councils, courts and schools for {i + 12} years, and before "
                  f"that wrote about rivers, mills and the people who live beside them for papers in three states "
                  f"and on the radio. She grew up on a farm north of the mill, studied history in the city, and came "
                  f"home to report on the places she knew, part {i}.</p>" for i in range(2))
    html = page(f"<article><h1>River walk</h1><p>{STORY}</p></article><div class=author-bio>{bio}</div>")
    out = text(html)
    assert "council voted" in out and "covered the valley" not in out


def _surroundings() -> str:
    """What a theme without semantic markup puts around an article, in elements whose class names the extraction's
    rules do not know: an author's bio, a "most read" list of full sentences, a site's blurb."""
    bio = ("<div class=c-au><p>Jane Roe is a corporate media reporter who has covered the valley's councils, "
           "courts and schools for twelve years, and before that wrote about rivers and mills for papers in three "
           "states.</p></div>")
    read = "".join(f"<div class=c-mr-{i}>Most read {i}: the mayor of the next town said on Monday that the ferry "
                   f"will stop running in winter and the school bus will take the long road instead</div>"
                   for i in range(4))
    blurb = ("<div class=c-ft><div>The Daily Planet is a network of companies in diversified media, news, education "
             "and information services, serving readers across the valley and beyond since 1950.</div></div>")
    return f"{bio}<div class=c-side>{read}</div>{blurb}"


def test_an_unmarked_article_is_read_in_its_paragraph_column() -> None:
    """An article page that marks nothing: the extraction keeps the bio, the list and the blurb around the article,
    which say more than the article's column, so the column is read, and the page and its print copy are one."""
    html = page(f"<div class=wrap><div class=c-main><h1>River walk to grow</h1>{PARAGRAPHS}</div>"
                f"{_surroundings()}</div>")
    out = text(html)
    assert "council voted on tuesday" in out and "four million dollars" in out
    for gone in ("corporate media reporter", "most read", "diversified media"):
        assert gone not in out, gone
    copy = page(f"<div>Print this page</div><h1>River walk to grow</h1>{PARAGRAPHS}<div>All rights reserved</div>")
    assert Sketcher().jaccard(html, copy) >= 0.9


def test_an_unmarked_article_in_several_containers_is_read_whole() -> None:
    """An article whose sections are paragraph containers of their own, an advertisement between them: their common
    parent is the column (it adds paragraphs and little else), so no section is lost."""
    html = page(f"<div class=wrap><div class=c-main><h1>Roads budget</h1><div class=c-s1>{ARTICLE}</div>"
                f"<div class=c-ad>Advertisement</div><div class=c-s2>{PARAGRAPHS}</div></div>{_surroundings()}</div>")
    out = text(html)
    assert "county board approved" in out and "salt barn" in out  # the first section, the paragraph body
    assert "council voted on tuesday" in out and "old rail bridge" in out  # the second
    assert "most read" not in out and "diversified media" not in out


def test_a_marked_article_is_not_cut_to_its_paragraph_column() -> None:
    """Where the page marks its article, what the page puts inside it is the page's to say: a list of full
    sentences inside the ``<article>`` stays."""
    facts = "".join(f"<div>Fact {i}: the walk will have benches, lamps and a ramp at the mill</div>" for i in range(8))
    html = page(f"<article><h1>River walk to grow</h1><div class=c-body>{PARAGRAPHS}</div>"
                f"<div class=c-side>{facts}</div></article>")
    out = text(html)
    assert "council voted on tuesday" in out and "fact 7 the walk will have benches" in out


POSTS = ("I bought the new case last week and the two small ports on the back are not in the manual at all.",
         "Those are for the fan hub: plug the hub cable into the left one and the lighting cable into the right.",
         "Thanks, that worked, and the fans now spin up with the pump instead of running flat out all the time.",
         "Same here, the manual for the white edition is also missing that page, support says a new one is coming.")


def _forum_topic(posts: tuple[str, ...]) -> str:
    """A forum topic as forum software serves it: every post (the first one too) an ``<article>`` of class
    "comment" inside ``<main>``."""
    cards = "".join(f"<article class='cPost ipsComment'><aside class=author><a href=/u/{i}>member{i}</a></aside>"
                    f"<div class=post-content><p>{post}</p></div></article>" for i, post in enumerate(posts))
    return page(f"<header><a href=/>Forums</a></header><main><h1>New case ports</h1>"
                f"<div class=meta>By <a href=/u/0>member0</a> in <a href=/f/3>Hardware</a></div>"
                f"<div class=comments>{cards}</div></main>", head="")


def test_a_forum_topic_whose_posts_are_comments_is_read_whole() -> None:
    """Beside a main content of a title and a byline, the comment thread is what the page says: its posts are read,
    and the topic and its print copy are one page."""
    topic = _forum_topic(POSTS)
    out = text(topic)
    assert "not in the manual" in out and "new one is coming" in out
    printed = page("<h1>New case ports</h1><p>By member0 in Hardware</p>" + "".join(f"<p>{post}</p>" for post in POSTS),
                   head="")
    assert Sketcher().jaccard(topic, printed) >= 0.9


def test_a_short_post_with_a_short_thread_is_not_read_with_it() -> None:
    """A thread that leaves the page short of a forum topic's words is not what the page says: the post alone is."""
    html = page(f"<article><h1>Ports</h1><p>{POSTS[0]}</p>"
                f"<section class=comments><div class=comment><p>{POSTS[1]}</p></div></section></article>")
    out = text(html)
    assert "not in the manual" in out and "fan hub" not in out


def _scripted(notice: str, shown: str) -> str:
    """A page its scripts render, with what it shows readers without scripts in ``<noscript>`` (as Discourse and
    Flarum serve a topic)."""
    return page(f"<noscript><p>{notice}</p></noscript><div id=app><div class=spinner>Loading</div></div>"
                f"<noscript data-path=/t/ports/7><div id=main-outlet>{shown}</div></noscript>", head="")


def test_a_page_its_scripts_render_is_read_as_it_shows_without_scripts() -> None:
    posts = "".join(f"<div class=crawler-post><span class=creator>member{i}</span><p>{post}</p></div>"
                    for i, post in enumerate(POSTS))
    html = _scripted("To use this forum you need JavaScript.", f"<h1>New case ports</h1>{posts}")
    out = text(html)
    assert "not in the manual" in out and "new one is coming" in out
    # The same topic as the forum serves it to a search engine's crawler: the same posts, without <noscript>.
    crawler_view = page(f"<div id=main-outlet><h1>New case ports</h1>{posts}</div>", head="")
    assert Sketcher().jaccard(html, crawler_view) >= 0.9


def test_a_page_too_large_to_read_twice_is_read_as_it_is() -> None:
    """The second reading is bounded: a page of more than SCRIPT_SHELL_BYTES bytes is not parsed again."""
    posts = "".join(f"<p>{post}</p>" for post in POSTS)
    scripted = _scripted("You need JavaScript.", posts)
    assert "new one is coming" in text(scripted)
    padded = scripted.replace("<div id=app>", f"<script>var x = '{'x' * SCRIPT_SHELL_BYTES}';</script><div id=app>")
    assert "new one is coming" not in text(padded)


def test_a_noscript_notice_stays_out_of_a_page_that_says_something() -> None:
    """``<noscript>`` content is read only where the page without it says little and the content says much more:
    an "enable JavaScript" notice, or a tracking pixel's fallback, stays out."""
    notice = "JavaScript is disabled in your browser, so some parts of this page may not work as they should."
    assert "javascript" not in text(page(f"<noscript><p>{notice}</p></noscript><main><p>{STORY}</p></main>"))
    short = "The river walk opens on Friday."
    out = text(page(f"<noscript><p>{notice}</p></noscript><p>{short}</p>", head=""))
    assert "river walk opens" in out and "javascript" not in out
    # A short page: its notice would make it over 50 words, but not twice as long.
    longer = " ".join([short] * 6)
    out = text(page(f"<noscript><p>{notice}</p></noscript><p>{longer}</p>", head=""))
    assert "river walk opens" in out and "javascript" not in out
