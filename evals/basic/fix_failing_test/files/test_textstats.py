import unittest

from textstats import mean, median, word_count


class TextStatsTest(unittest.TestCase):
    def test_word_count(self):
        self.assertEqual(word_count("the quick  brown fox"), 4)
        self.assertEqual(word_count(""), 0)

    def test_mean(self):
        self.assertEqual(mean([2, 4, 9]), 5)
        with self.assertRaises(ValueError):
            mean([])

    def test_median_odd(self):
        self.assertEqual(median([7, 1, 3]), 3)

    def test_median_even(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)
        self.assertEqual(median([10, 20]), 15)

    def test_median_empty(self):
        with self.assertRaises(ValueError):
            median([])


if __name__ == "__main__":
    unittest.main()
