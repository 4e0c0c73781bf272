package embedsession

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/embedkit/embedkit/internal/provision"
	"github.com/embedkit/embedkit/internal/wire"
	"github.com/embedkit/embedkit/middleware"
	"github.com/embedkit/embedkit/store"
)

// Page sizes of the admin list endpoints.
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// PageInfo tells whether a list has more items after the page, and the
// cursor to pass as ?after= to get them.
type PageInfo struct {
	HasNextPage bool `json:"hasNextPage"`
	// EndCursor is the cursor of the page's last item; nil for an empty
	// page.
	EndCursor *string `json:"endCursor"`
}

// GroupItem is a group of an embed tenant as the admin list shows it.
type GroupItem struct {
	ID          string    `json:"id"`
	Name        string    `json:"name"`
	Description string    `json:"description"`
	CreatedAt   time.Time `json:"createdAt"`
	UpdatedAt   time.Time `json:"updatedAt"`
}

// AttributeItem is an attribute definition of an embed tenant as the admin
// list shows it.
type AttributeItem struct {
	ID           string              `json:"id"`
	Name         string              `json:"name"`
	Type         store.AttributeType `json:"type"`
	DisplayName  string              `json:"displayName"`
	DefaultValue string              `json:"defaultValue"`
	Description  string              `json:"description"`
	CreatedAt    time.Time           `json:"createdAt"`
	UpdatedAt    time.Time           `json:"updatedAt"`
}

// Page is the body of the admin list endpoints.
type Page[T any] struct {
	Items    []T      `json:"items"`
	PageInfo PageInfo `json:"pageInfo"`
}

var (
	errTenantNotFound = wire.Errorf(http.StatusNotFound, "embed tenant not found")
	errGroupNotFound  = wire.Errorf(http.StatusNotFound, "group not found")
	errAttrNotFound   = wire.Errorf(http.StatusNotFound, "user attribute not found")
)

// tenantScope resolves the {embedTenantName} of an admin request to the
// scope of that embed tenant in the caller's account.
func (h *Handler) tenantScope(ctx context.Context, r *http.Request) (store.Scope, error) {
	acct, _, _ := middleware.AccountFromContext(ctx)
	name := r.PathValue("embedTenantName")
	if !provision.ValidEmbedTenantName(name) {
		return store.Scope{}, errTenantNotFound
	}
	et, err := h.st.EmbedTenantByName(ctx, acct.ID, name)
	if errors.Is(err, store.ErrNotFound) {
		return store.Scope{}, errTenantNotFound
	}
	if err != nil {
		return store.Scope{}, err
	}
	return store.Scope{AccountID: acct.ID, EmbedTenantID: et.ID}, nil
}

// pageParams parses ?first= and ?after=, strictly: a value that does not
// decode is refused, not dropped (url.Values would drop the pair, and a
// page the client did not ask for would come back), and so is first or
// after given twice (which would the client mean?). Other parameters are
// ignored.
func pageParams(r *http.Request) (first int, afterID int64, err error) {
	first = DefaultPageSize
	var seenFirst, seenAfter bool
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		k, v, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(k)
		val, verr := url.QueryUnescape(v)
		switch {
		case pair == "":
		case kerr != nil:
			return 0, 0, wire.BadRequest("the query string is not valid: %q", k)
		case (key == "first" && seenFirst) || (key == "after" && seenAfter):
			return 0, 0, wire.BadRequest("%s must appear at most once in the query string", key)
		case key == "first":
			seenFirst = true
			n, err := strconv.Atoi(val)
			if verr != nil || err != nil || n < 1 || n > MaxPageSize {
				return 0, 0, wire.BadRequest("first must be a whole number from 1 to %d", MaxPageSize)
			}
			first = n
		case key == "after":
			seenAfter = true
			if verr == nil {
				afterID, err = decodeCursor(val)
			}
			if verr != nil || err != nil {
				return 0, 0, wire.BadRequest("after must be an endCursor returned by this endpoint")
			}
		}
	}
	return first, afterID, nil
}

// listPage runs list for one page and writes it.
func listPage[S, T any](h *Handler, w http.ResponseWriter, r *http.Request,
	list func(ctx context.Context, s store.Scope, afterID int64, limit int) ([]S, error),
	item func(S) (int64, T)) {
	ctx := r.Context()
	first, after, err := pageParams(r)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	scope, err := h.tenantScope(ctx, r)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	rows, err := list(ctx, scope, after, first+1)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	page := Page[T]{Items: make([]T, 0, min(len(rows), first))}
	if len(rows) > first {
		rows = rows[:first]
		page.PageInfo.HasNextPage = true
	}
	var last int64
	for _, row := range rows {
		id, it := item(row)
		page.Items = append(page.Items, it)
		last = id
	}
	if len(rows) > 0 {
		c := encodeCursor(last)
		page.PageInfo.EndCursor = &c
	}
	wire.WriteJSON(w, http.StatusOK, page)
}

func (h *Handler) listGroups(w http.ResponseWriter, r *http.Request) {
	listPage(h, w, r, h.st.ListGroups, func(g store.Group) (int64, GroupItem) {
		return g.ID, GroupItem{
			ID: strconv.FormatInt(g.ID, 10), Name: g.Name, Description: g.Description,
			CreatedAt: g.CreatedAt.UTC(), UpdatedAt: g.UpdatedAt.UTC(),
		}
	})
}

func (h *Handler) listAttributes(w http.ResponseWriter, r *http.Request) {
	listPage(h, w, r, h.st.ListAttributes, func(a store.Attribute) (int64, AttributeItem) {
		return a.ID, AttributeItem{
			ID: strconv.FormatInt(a.ID, 10), Name: a.Name, Type: a.Type, DisplayName: a.DisplayName,
			DefaultValue: a.DefaultValue, Description: a.Description,
			CreatedAt: a.CreatedAt.UTC(), UpdatedAt: a.UpdatedAt.UTC(),
		}
	})
}

// deleteItem deletes the {id} of an embed tenant with del.
func (h *Handler) deleteItem(w http.ResponseWriter, r *http.Request, notFound error,
	del func(ctx context.Context, s store.Scope, id int64) error) {
	ctx := r.Context()
	scope, err := h.tenantScope(ctx, r)
	if err != nil {
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	// Only the id as the lists write it: not "+3" or "03" for 3.
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id <= 0 || strconv.FormatInt(id, 10) != raw {
		wire.WriteError(w, r, h.o.log, notFound)
		return
	}
	err = del(ctx, scope, id)
	h.defs.Forget() // also after an error: the deletion may have committed
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			err = notFound
		}
		wire.WriteError(w, r, h.o.log, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) deleteGroup(w http.ResponseWriter, r *http.Request) {
	h.deleteItem(w, r, errGroupNotFound, h.st.DeleteGroup)
}

func (h *Handler) deleteAttribute(w http.ResponseWriter, r *http.Request) {
	h.deleteItem(w, r, errAttrNotFound, h.st.DeleteAttribute)
}
