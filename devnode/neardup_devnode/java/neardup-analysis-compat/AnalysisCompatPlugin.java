package org.scrapyneardup.esshim.analysis;

import java.io.IOException;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.regex.Pattern;
import org.apache.lucene.analysis.CharArraySet;
import org.apache.lucene.analysis.TokenFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;
import org.apache.lucene.analysis.tokenattributes.PositionIncrementAttribute;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/** uax_url_email, pattern_capture and unique, as in Elasticsearch's analysis-common module. */
public final class AnalysisCompatPlugin extends Plugin implements AnalysisPlugin {

    private static final class Filter implements TokenFilterFactory {
        private final String name;
        private final Function<TokenStream, TokenStream> wrap;

        Filter(String name, Function<TokenStream, TokenStream> wrap) {
            this.name = name;
            this.wrap = wrap;
        }

        @Override
        public String name() {
            return name;
        }

        @Override
        public TokenStream create(TokenStream tokenStream) {
            return wrap.apply(tokenStream);
        }
    }

    private static final class UniqueFilter extends TokenFilter {
        private final CharTermAttribute term = addAttribute(CharTermAttribute.class);
        private final PositionIncrementAttribute posInc = addAttribute(PositionIncrementAttribute.class);
        private final CharArraySet seen = new CharArraySet(8, false);
        private final boolean onlyOnSamePosition;

        UniqueFilter(TokenStream in, boolean onlyOnSamePosition) {
            super(in);
            this.onlyOnSamePosition = onlyOnSamePosition;
        }

        @Override
        public boolean incrementToken() throws IOException {
            while (input.incrementToken()) {
                if (onlyOnSamePosition && posInc.getPositionIncrement() > 0) {
                    seen.clear();
                }
                final char[] buffer = term.buffer();
                final int length = term.length();
                if (seen.contains(buffer, 0, length)) {
                    continue;
                }
                final char[] copy = new char[length];
                System.arraycopy(buffer, 0, copy, 0, length);
                seen.add(copy);
                return true;
            }
            return false;
        }

        @Override
        public void reset() throws IOException {
            super.reset();
            seen.clear();
        }
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        Map<String, AnalysisProvider<TokenFilterFactory>> filters = new HashMap<>();
        filters.put("pattern_capture", AnalysisPlugin.requiresAnalysisSettings((indexSettings, env, name, settings) -> {
            List<String> regexes = settings.getAsList("patterns");
            if (regexes.isEmpty()) {
                throw new IllegalArgumentException(
                    "required setting 'patterns' is missing for token filter [" + name + "]");
            }
            Pattern[] patterns = new Pattern[regexes.size()];
            for (int i = 0; i < patterns.length; i++) {
                patterns[i] = Pattern.compile(regexes.get(i));
            }
            boolean preserveOriginal = settings.getAsBoolean("preserve_original", true);
            return new Filter(name, ts -> new PatternCaptureGroupTokenFilter(ts, preserveOriginal, patterns));
        }));
        filters.put("unique", (indexSettings, env, name, settings) -> {
            boolean samePosition = settings.getAsBoolean("only_on_same_position", false);
            return new Filter(name, ts -> new UniqueFilter(ts, samePosition));
        });
        return filters;
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        Map<String, AnalysisProvider<TokenizerFactory>> tokenizers = new HashMap<>();
        tokenizers.put("uax_url_email", (indexSettings, env, name, settings) -> {
            int maxTokenLength = settings.getAsInt("max_token_length", 255);
            return TokenizerFactory.newFactory(name, () -> {
                UAX29URLEmailTokenizer tokenizer = new UAX29URLEmailTokenizer();
                tokenizer.setMaxTokenLength(maxTokenLength);
                return tokenizer;
            });
        });
        return tokenizers;
    }
}
