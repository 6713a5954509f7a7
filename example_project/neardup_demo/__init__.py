"""Example Scrapy project: a spider that follows links and a near-duplicate pipeline that filters its items."""
