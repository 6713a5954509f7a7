"""Settings of the scrapy-neardup example project.

Only ADDONS is needed to enable near-duplicate filtering, soft-404 probing and mirror-host skipping; every
NEARDUP_* setting below shows its default (except NEARDUP_MIRROR_MIN_PAGES, lowered for this small site) and may
be left out. Any of them can be overridden per run on the command line, e.g.
``scrapy crawl demo -a start_url=http://127.0.0.1:8000/ -s NEARDUP_ACTION=mark -O pages.jsonl``.

Pointing the same project at Elasticsearch (several crawler processes sharing one store of kept pages):

    URL=$(neardup es start | tail -n1)           # a local node (pip install -e ./devnode), or your own cluster
    NEARDUP_BACKEND=elasticsearch NEARDUP_ES_URL=$URL python run_demo.py
    # or: scrapy crawl demo -a start_url=... -s NEARDUP_BACKEND=elasticsearch -s NEARDUP_ES_URL=$URL
"""

import os

BOT_NAME = "neardup_demo"
SPIDER_MODULES = ["neardup_demo.spiders"]
NEWSPIDER_MODULE = "neardup_demo.spiders"

ROBOTSTXT_OBEY = True
# Polite crawling, as Scrapy's project template suggests: one request at a time per host, a short pause
# between them. It also lets the crawl notice the mirror host while most of its pages are still unfetched.
CONCURRENT_REQUESTS_PER_DOMAIN = 1
DOWNLOAD_DELAY = 0.05
FEED_EXPORT_ENCODING = "utf-8"

# First seen is kept. Crawling breadth-first reaches the pages linked from the home page (the canonical
# articles) before the copies linked from deeper pages, so the copies are the ones that get dropped.
DEPTH_PRIORITY = 1
SCHEDULER_DISK_QUEUE = "scrapy.squeues.PickleFifoDiskQueue"
SCHEDULER_MEMORY_QUEUE = "scrapy.squeues.FifoMemoryQueue"

# -- near-duplicate filtering ---------------------------------------------------------------------------------

# The add-on enables the pipeline (ITEM_PIPELINES, 300) and the soft-404 and mirror-host downloader middlewares.
ADDONS = {"scrapy_neardup.NearDuplicateAddon": 0}

# Set to False to switch the pipeline off without removing it.
NEARDUP_ENABLED = True

# Item fields: the page text (plain text or HTML; markup, scripts and styles are ignored) and the page URL,
# which is the name a kept page is reported under. Items without a URL get a stable key derived from their
# text and are counted in neardup/missing_url.
NEARDUP_TEXT_FIELD = "text"
NEARDUP_URL_FIELD = "url"

# When is a page a near-duplicate? Its text is cut into word 5-shingles (runs of 5 words) and summarized by
# a MinHash sketch of k = NEARDUP_NUM_PERM positions; each position agrees between two pages with probability
# r, their resemblance (shared shingles / all shingles). A page is a near-duplicate of a kept page when at
# least t = NEARDUP_MIN_SHARED positions agree. By default t is derived from NEARDUP_THRESHOLD: the largest t
# that still catches pages of resemblance 0.9 with probability >= 0.99 (t = 107 of 128); pages of resemblance
# 0.5 are then flagged with probability ~1e-15.
NEARDUP_THRESHOLD = 0.9
# NEARDUP_MIN_SHARED = 107        # set t directly instead (overrides NEARDUP_THRESHOLD)
NEARDUP_NUM_PERM = 128
NEARDUP_SHINGLE = "word"          # "char" (character 9-grams) suits languages without spaces, short texts
# NEARDUP_SHINGLE_SIZE = 5        # units per shingle (default 5 words, 9 characters)
NEARDUP_SEED = 1                  # sketches are comparable only when made with the same k, shingling and seed
NEARDUP_CONTENT = "auto"          # the page's own text; "main": the main content it marks; "body": all its text

# "drop" raises NearDuplicateDropped (counted as item_dropped_reasons_count/NearDuplicateDropped);
# "mark" keeps the item and sets NEARDUP_MARK_FIELD to {"duplicate_of": url, "resemblance": r, "exact": bool}
# (a scrapy.Item must declare that field, see items.py).
NEARDUP_ACTION = os.environ.get("NEARDUP_ACTION", "drop")
NEARDUP_MARK_FIELD = "neardup"

# Where kept sketches live. "embedded": in the crawler process, saved on close to NEARDUP_STATE_DIR, which
# defaults to <JOBDIR>/neardup, so `scrapy crawl demo -s JOBDIR=crawls/demo-1` can be stopped with one Ctrl-C
# and resumed, and the resumed crawl still drops copies of pages kept before the pause. Without JOBDIR or
# NEARDUP_STATE_DIR nothing is saved. NEARDUP_RESET = True discards the saved state at start.
# "elasticsearch": one index shared by every crawler process; set the URL and, for a secured cluster, an API
# key or a user name and password, and the CA certificate of its TLS. The index outlives the crawl (a later
# crawl of the same URLs finds its pages known: revisits); run_demo.py, which serves the site on a new port each
# run, deletes this index before it crawls, so that each run starts afresh.
NEARDUP_BACKEND = os.environ.get("NEARDUP_BACKEND", "embedded")
# NEARDUP_STATE_DIR = "neardup-state"
NEARDUP_RESET = False
# One crawl emits a page once: met again unchanged (a start URL linked again, a page fetched again after a resume)
# it is a repeat, dropped as RepeatDropped; a later crawl emits it again (a revisit). One crawl is one JOBDIR,
# paused or killed and resumed; without JOBDIR, one run. NEARDUP_CRAWL_ID names the crawl explicitly.
# NEARDUP_CRAWL_ID = "news-2026-11-24"
NEARDUP_ES_URL = os.environ.get("NEARDUP_ES_URL")                    # e.g. "http://127.0.0.1:9200"
NEARDUP_ES_INDEX = os.environ.get("NEARDUP_ES_INDEX", "neardup-demo")
NEARDUP_ES_API_KEY = os.environ.get("NEARDUP_ES_API_KEY")
NEARDUP_ES_USERNAME = os.environ.get("NEARDUP_ES_USERNAME")
NEARDUP_ES_PASSWORD = os.environ.get("NEARDUP_ES_PASSWORD")
NEARDUP_ES_CA_CERTS = os.environ.get("NEARDUP_ES_CA_CERTS")          # path of the cluster's CA certificate

# A search index of the crawl: each item is written to NEARDUP_SEARCH_INDEX (on the NEARDUP_ES_* node) with the
# sketch the pipeline made of it; with NEARDUP_SEARCH_DUPLICATES = "index" the near-duplicates are written too, as
# duplicates of their kept page, so that a collapsed search shows the kept page with "N similar omitted".
# `python run_demo.py --search` sets the index and the node, crawls, and serves a search page over the index.
NEARDUP_SEARCH_INDEX = os.environ.get("NEARDUP_SEARCH_INDEX")
NEARDUP_SEARCH_DUPLICATES = "index"

# Soft 404s: each host is asked once for a URL that cannot exist, /neardup-soft404-probe-<random>, with the
# crawl's user agent (and once per first path segment, /news/..., up to NEARDUP_SOFT404_PROBES_PER_HOST probes,
# 20 by default); a page is compared with what the root and its own segment answered with status 200, and one that
# near-duplicates it is dropped as Soft404Dropped, none of them kept.
# A page waits at most NEARDUP_SOFT404_TIMEOUT seconds for them.
NEARDUP_SOFT404_ENABLED = True
NEARDUP_SOFT404_PROBES_PER_HOST = 20
NEARDUP_SOFT404_TIMEOUT = 30

# Mirror hosts: once a host has NEARDUP_MIRROR_MIN_PAGES checked pages, NEARDUP_MIRROR_SHARE of them have a
# near-duplicate on another host, and that host holds the kept copies, its remaining requests are skipped before
# download. Of two hosts serving the same pages, the copies of the host met first are kept: a later host's page
# waits (NEARDUP_COPY_WAIT, 2 s or four DOWNLOAD_DELAY) for the earlier host's copy. The price: its
# pages not fetched yet that exist nowhere else are not crawled (at most about 1 - share of them); a share of
# 1.0 skips only perfect mirrors. The default of 20 pages is lowered here because the demo site is tiny.
NEARDUP_MIRRORS_ENABLED = True
NEARDUP_MIRROR_MIN_PAGES = 5
NEARDUP_MIRROR_SHARE = 0.9

# Log every drop at INFO (like DUPEFILTER_DEBUG); by default drops are logged at DEBUG and a summary line is
# logged at INFO when the spider closes.
NEARDUP_DEBUG = False
